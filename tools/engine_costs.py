"""What the engine's own process costs: start-up to a loaded pair, the window's memory, and
the speed of a reply in the window against the same reply on the command line.

    QT_QPA_PLATFORM=offscreen python tools/engine_costs.py [--runs 3] [--max-tokens 128]
    QT_QPA_PLATFORM=offscreen python tools/engine_costs.py --runs 1 --max-tokens 16   # a smoke run

Each run starts fresh Python processes, alternating the modes so a machine's drift
falls on both alike:

- ``cli``: the command line's path (``load_session``, then ``ChatSession.reply``), no window;
- ``thread``: the window with the engine host on a thread of its own process;
- ``process``: the window with its engine process, started and asked for the models
  before the window's own modules are imported (as ``app.cli.gui.launch`` does now);
- ``late`` (not in the default list): the engine process started by the window itself,
  once it is built (as the app did before), for a before/after figure in one run.

For each it prints the seconds from the process's start to a loaded pair, the window
process's RSS once the reply is done (and the engine's, for ``process``), and the
reply's tokens/s (tokens over the wall time from sending to the last token shown).
The medians close the output, with process/thread and window/cli ratios. Not a test:
figures need a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Write a Python function that reverses a linked list, and explain it."

CHILD = r"""
import json, os, sys, time
started = time.perf_counter()
mode, target, draft, max_tokens, prompt = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]

def rss(pid="self"):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return 0.0
    return 0.0

if mode == "cli":
    from app.engine.types import SamplingConfig, SpecConfig
    from app.session.config import ModelSpec
    from app.session.loading import load_session
    session = load_session(ModelSpec(target_path=target, draft_path=draft, n_ctx=2048))
    loaded = time.perf_counter() - started
    sent = time.perf_counter()
    generation = session.reply([("user", prompt)], SamplingConfig(), SpecConfig(), max_tokens)
    tokens = sum(1 for _ in generation)
    wall = time.perf_counter() - sent
    print(json.dumps({"loaded_s": loaded, "tokens": tokens, "tok_s": tokens / wall, "window_mib": rss(),
                      "engine_mib": 0.0}))
    sys.exit(0)

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

app = QApplication([])
client = None
from app.storage.settings import LoadedSettings, Settings
settings = Settings(target_path=target, draft_path=draft, n_ctx=2048, max_tokens=max_tokens, temperature=0.0)
if mode == "process":  # as app.cli.gui.launch does: the engine starts, and is asked for the
    # models, before the window's modules load
    from app.bridge.engine_process import EngineProcessClient
    from app.cli.gui import start_loading
    client = EngineProcessClient()
    start_loading(client, settings)
from app.window.main_window import MainWindow

if mode == "thread":
    from app.bridge.engine_process import EngineProcessClient
    from app.enginehost.thread_link import thread_link
    client = EngineProcessClient(start_link=thread_link())
window = MainWindow(LoadedSettings(settings, None), client=client)
window.show()
result = {}

def on_loaded(info):
    result["loaded_s"] = time.perf_counter() - started
    result["sent"] = time.perf_counter()
    QTimer.singleShot(0, lambda: window.send(prompt))

def on_finished(reply):
    wall = time.perf_counter() - result.pop("sent")
    result.update(tokens=len(reply.events), tok_s=len(reply.events) / wall, window_mib=rss(),
                  engine_mib=rss(window.client.pid) if window.client.separate_process else 0.0)
    print(json.dumps(result), flush=True)
    window.close()
    app.quit()

window.client.loaded.connect(on_loaded)
window.reply_finished.connect(on_finished)
app.exec()
"""


def run(mode: str, target: str, draft: str, max_tokens: int, home: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=home)
    done = subprocess.run([sys.executable, "-c", CHILD, mode, target, draft, str(max_tokens), PROMPT],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{mode} run failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--modes", default="cli,thread,process")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from app.models.demo import demo_pair

    pair = demo_pair()
    modes = args.modes.split(",")
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="tandem-engine-costs-") as home:
        run(modes[0], str(pair.target), str(pair.draft), 4, home)  # trial loads remembered, caches warm
        for n in range(args.runs):
            for mode in modes if n % 2 == 0 else reversed(modes):
                record = run(mode, str(pair.target), str(pair.draft), args.max_tokens, home)
                results[mode].append(record)
                print(f"{mode:8} loaded in {record['loaded_s']:.2f} s, {record['tokens']} tokens at "
                      f"{record['tok_s']:.1f} tok/s, window RSS {record['window_mib']:.0f} MiB"
                      + (f", engine RSS {record['engine_mib']:.0f} MiB" if record["engine_mib"] else ""), flush=True)
    median = {mode: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for mode, rows in results.items()}
    for mode, m in median.items():
        print(f"median {mode:8} start-up {m['loaded_s']:.2f} s, {m['tok_s']:.1f} tok/s, window RSS "
              f"{m['window_mib']:.0f} MiB" + (f", engine RSS {m['engine_mib']:.0f} MiB" if m["engine_mib"] else ""))
    if "thread" in median and "process" in median:
        print(f"process - thread start-up: {median['process']['loaded_s'] - median['thread']['loaded_s']:+.2f} s; "
              f"speed process/thread {median['process']['tok_s'] / median['thread']['tok_s']:.3f}x")
    if "late" in median and "process" in median:
        print(f"process - late start-up: {median['process']['loaded_s'] - median['late']['loaded_s']:+.2f} s")
    if "cli" in median and "process" in median:
        print(f"window (process) / cli speed: {median['process']['tok_s'] / median['cli']['tok_s']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
