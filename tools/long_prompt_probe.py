"""An agent's turns against llama-server: a long head (instructions and a source file),
then follow-ups that extend the same conversation, streamed, greedy.

    python tools/long_prompt_probe.py --server PATH/llama-server [--target T.gguf --draft D.gguf]
        [--file SOME.py] [--head-tokens 3600] [--followups 2] [--max-tokens 128] [--ctx 8192]
        [--template chatml|gemma] [--interleave] [--rounds 1] [--tandem-extra "--flash-attn on"]

Each system runs as a server of its own, started, probed and stopped in turn (the order
rotates per round), with the same threads: ``llama-server`` with the target alone, and
``tandem serve`` with its defaults (the demo pair unless ``--target``/``--draft``).
Every turn goes through ``/v1/completions`` as one text (the conversation so far, in the
template's turns), so both sides read exactly the same tokens. For each turn it records
the first token's wait and the whole turn's; ``--interleave`` sends another client's
short unrelated request before each follow-up (a second agent, an editor's completion).

The head is the file (default: the standard library's ``inspect.py``, a file this project
did not write) cut to about ``--head-tokens`` tokens. Prints a table of medians over the
rounds and the ratios Tandem ÷ llama-server; ``--out`` writes them as JSON. Run nothing
else meanwhile: timings depend on the machine and its load. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

TEMPLATES = {
    "chatml": ("<|im_start|>system\n{s}<|im_end|>\n", "<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n",
               "{a}<|im_end|>\n"),
    "gemma": ("", "<start_of_turn>user\n{q}<end_of_turn>\n<start_of_turn>model\n", "{a}<end_of_turn>\n"),
}
SYSTEM = ("You are a senior engineer reviewing code for a colleague. Answer precisely, quote names "
          "from the file, and keep each answer short.")
QUESTIONS = ("Summarise what this file does, in five bullet points.",
             "Which function here is the most complex, and why?",
             "Suggest one test that would catch a regression in it.",
             "What would you rename, and to what?")
OTHER_CLIENT = "Write a haiku about autumn rain."
CHARS_PER_TOKEN = 3.9  # source code, for a first cut; the server's own count is printed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, log: str) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"server exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"server did not start; see {log}")


def start(system: str, a: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = os.path.join(tempfile.gettempdir(), f"long-prompt-{system}.log")
    if system == "llama-server":
        cmd = [a.server, "-m", a.target or a.demo_target, "--port", str(port), "-t", str(a.threads),
               "-tb", str(a.threads), "-c", str(a.ctx), "-np", "1", "--no-webui", *a.server_extra.split()]
    else:
        cmd = [a.python, "-m", "app", "serve", "--port", str(port), "--n-ctx", str(a.ctx),
               "--threads", str(a.threads)]
        if a.target:
            cmd += ["--target", a.target]
        if a.draft:
            cmd += ["--draft", a.draft]
        cmd += a.tandem_extra.split()
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc, log)
    return proc, url


def turn(url: str, prompt: str, max_tokens: int) -> tuple[float, float, str, int]:
    """(first token's wait, whole turn, the reply, prompt tokens) of one streamed request."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first, text, prompt_tokens = None, [], 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or ():
                if choice.get("text"):
                    first = first or time.perf_counter() - started
                    text.append(choice["text"])
            usage = chunk.get("usage") or {}
            prompt_tokens = usage.get("prompt_tokens", prompt_tokens)
    return first or time.perf_counter() - started, time.perf_counter() - started, "".join(text), prompt_tokens


def probe(system: str, a: argparse.Namespace, head: str) -> list[dict]:
    system_turn, user_turn, reply_end = TEMPLATES[a.template]
    proc, url = start(system, a)
    try:
        prompt = system_turn.format(s=SYSTEM) + user_turn.format(q=f"```python\n{head}\n```\n\n{QUESTIONS[0]}")
        rows = []
        for i in range(1 + a.followups):
            if i and a.interleave:
                turn(url, user_turn.format(q=OTHER_CLIENT), 32)
            first, whole, reply, n_prompt = turn(url, prompt, a.max_tokens)
            rows.append({"turn": "cold" if i == 0 else f"follow-up {i}", "first": first, "whole": whole,
                         "prompt_tokens": n_prompt, "reply": reply})
            prompt += reply_end.format(a=reply) + user_turn.format(q=QUESTIONS[(i + 1) % len(QUESTIONS)])
        return rows
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="llama-server binary")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs Tandem")
    ap.add_argument("--target", help="target GGUF (default: the demo target)")
    ap.add_argument("--draft", help="draft GGUF for Tandem (default: its own default)")
    ap.add_argument("--file", default=inspect.__file__, help="the source file in the head")
    ap.add_argument("--head-tokens", type=int, default=3600)
    ap.add_argument("--followups", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--template", choices=sorted(TEMPLATES), default="chatml")
    ap.add_argument("--interleave", action="store_true", help="another client's request before each follow-up")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tandem-extra", default="", help="more arguments for tandem serve")
    ap.add_argument("--server-extra", default="", help="more arguments for llama-server (e.g. '-fa off')")
    ap.add_argument("--out", help="write the figures here as JSON")
    ap.add_argument("--baseline", help="llama-server's figures from an earlier --out, instead of running it again")
    a = ap.parse_args()
    from app.models.demo_facts import TARGET_FILE  # noqa: PLC0415 (the checkout's, run from its root)
    a.demo_target = os.path.join(os.path.expanduser("~/.cache/Tandem/models"), TARGET_FILE)
    head = open(a.file, encoding="utf-8").read()[: int(a.head_tokens * CHARS_PER_TOKEN)]
    systems = ["llama-server", "tandem"]
    runs: dict[str, list[list[dict]]] = {s: [] for s in systems}
    if a.baseline:  # (only to try a change quickly: ratios belong to one run)
        runs["llama-server"] = json.load(open(a.baseline))["runs"]["llama-server"]
    for r in range(a.rounds):
        for s in systems[r % 2:] + systems[:r % 2]:
            if a.baseline and s == "llama-server":
                continue
            runs[s].append(probe(s, a, head))
            print(f"round {r + 1}: {s} done", file=sys.stderr, flush=True)
    turns = [row["turn"] for row in runs["llama-server"][0]]
    table = {s: [{"turn": t, "prompt_tokens": runs[s][0][i]["prompt_tokens"],
                  "first": statistics.median(run[i]["first"] for run in runs[s]),
                  "whole": statistics.median(run[i]["whole"] for run in runs[s])}
                 for i, t in enumerate(turns)] for s in systems}
    same = [runs["tandem"][0][i]["reply"] == runs["llama-server"][0][i]["reply"] for i in range(len(turns))]
    print(f"{'turn':<13} {'tokens':>7} | {'llama-server first':>18} {'whole':>7} | {'tandem first':>12} "
          f"{'whole':>7} | {'first x':>7} {'whole x':>7} | same text")
    for i, t in enumerate(turns):
        ls, ts = table["llama-server"][i], table["tandem"][i]
        print(f"{t:<13} {ls['prompt_tokens']:>7} | {ls['first']:>17.2f}s {ls['whole']:>6.2f}s | "
              f"{ts['first']:>11.2f}s {ts['whole']:>6.2f}s | {ts['first'] / ls['first']:>7.2f} "
              f"{ts['whole'] / ls['whole']:>7.2f} | {same[i]}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"table": table, "runs": runs, "same_text": same, "args": {k: v for k, v in vars(a).items()}}, f, indent=1)


if __name__ == "__main__":
    main()
