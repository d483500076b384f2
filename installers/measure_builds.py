#!/usr/bin/env python3
"""What each llama.cpp build costs here: plain steps and verification batches, side by side.

    python3 installers/measure_builds.py                       # the builds set-up made, demo models
    python3 installers/measure_builds.py --builds native-no-amx,portable --rounds 5

For each build in set-up's build cache (installers/setup.py keeps one wheel per
variant), its libraries are unpacked to build/llama-libs/ and a child process loads
them through LLAMA_CPP_LIB_PATH: first the probe (a build that dies is reported, not
timed), then, per model, one plain step (a single token after a 256-token prompt)
and verification batches of 2, 4, 8 and 16 tokens, each timed many times. Builds
take turns within each round, so drift in the machine's load falls on all of them;
a round's figure is the median of its repeats and the reported one the median over
rounds. Models: the demo target (F32), the demo draft (Q4_1) and, with --q4km, the
demo target re-encoded as Q4_K_M by llama.cpp's quantizer (written once to the
model cache).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "installers"))
import build_bundle  # noqa: E402  (a sibling script: unpacks and probes a cached build)

BATCHES = (1, 2, 4, 8, 16)
PROMPT = 256

CHILD = r"""
import json, os, statistics, sys, time
from app.backends.llama.backend import LlamaBackend
from app.backends.llama.process_setup import system_info
path, repeats, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = LlamaBackend(path, n_ctx=1024, n_threads=threads, flash_attention="auto")
prompt = [(i * 37 + 11) % 1000 + 10 for i in range(PROMPT_LEN)]
model.evaluate(prompt, [len(prompt) - 1])
out = {"amx": "AMX_INT8 = 1" in system_info()["system_info"]}
for n in BATCH_SIZES:
    times = []
    for r in range(repeats):
        batch = [(r * 7 + j) % 900 + 20 for j in range(n)]
        start = time.perf_counter()
        model.evaluate(batch, list(range(n)))
        times.append(time.perf_counter() - start)
        model.trim(len(prompt))
    out[str(n)] = statistics.median(times) * 1000
model.close()
print(json.dumps(out))
""".replace("PROMPT_LEN", str(PROMPT)).replace("BATCH_SIZES", repr(BATCHES))


def lib_folder(setup, name: str, backend: str) -> Path | None:
    variant = next((v for v in setup.variants.variants(backend) if v.name == name), None)
    if variant is None:
        return None
    sdist = setup.resolve_sdist()
    folder = setup.wheel_folder(variant, sdist)
    if not list(folder.glob("*.whl")):
        return None
    return build_bundle.unpack_libs(next(folder.glob("*.whl")))


def q4km_model(target: Path, venv_python: Path) -> Path:
    dest = target.with_name(target.name.replace(".F32.", ".Q4_K_M."))
    if not dest.exists():
        code = ("import ctypes, llama_cpp as ll, sys; p = ll.llama_model_quantize_default_params(); "
                "p.ftype = ll.LLAMA_FTYPE_MOSTLY_Q4_K_M; p.nthread = 2; "
                "sys.exit(ll.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))")
        subprocess.run([str(venv_python), "-c", code, str(target), str(dest)], check=True, capture_output=True)
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", default="native,native-no-amx,portable")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15, help="timed evaluations per batch size and round")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--q4km", action="store_true", help="also the demo target re-encoded as Q4_K_M")
    args = parser.parse_args()
    setup = build_bundle._setup_module()
    python = build_bundle.venv_python()
    backend = setup.read_marker().get("backend", "cpu")
    env_base = {**os.environ, "PYTHONPATH": str(ROOT)}
    demo = json.loads(subprocess.run(
        [str(python), "-c", "import json; from app.models.demo import demo_pair; p = demo_pair(); "
                            "print(json.dumps([str(p.target), str(p.draft)]))"],
        capture_output=True, text=True, check=True, env=env_base).stdout)
    models = {"F32 target": Path(demo[0]), "Q4_1 draft": Path(demo[1])}
    if args.q4km:
        models["Q4_K_M target"] = q4km_model(Path(demo[0]), python)

    builds: dict[str, Path] = {}
    for name in args.builds.split(","):
        folder = lib_folder(setup, name, backend)
        if folder is None:
            print(f"{name}: not in the build cache (installers/setup.py makes it when it needs it)")
            continue
        outcome = setup.probe({"LLAMA_CPP_LIB_PATH": str(folder)})
        if not outcome["ok"]:
            print(f"{name}: {outcome['detail']} - not timed")
            continue
        builds[name] = folder
    results: dict[tuple[str, str], list[dict]] = {}
    for round_no in range(args.rounds):
        for model_name, path in models.items():
            order = list(builds) if round_no % 2 == 0 else list(reversed(builds))
            for name in order:
                env = {**env_base, "LLAMA_CPP_LIB_PATH": str(builds[name])}
                done = subprocess.run([str(python), "-c", CHILD, str(path), str(args.repeats), str(args.threads)],
                                      capture_output=True, text=True, env=env)
                if done.returncode != 0:
                    print(f"{name} on {model_name}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
                    continue
                results.setdefault((model_name, name), []).append(json.loads(done.stdout.strip().splitlines()[-1]))

    print(f"\nmilliseconds per evaluation after a {PROMPT}-token prompt (median of rounds of medians)")
    header = f"{'model':<15} {'build':<15}" + "".join(f"{n:>9}" for n in BATCHES)
    print(header + "\n" + "-" * len(header))
    for model_name in models:
        base = None
        for name in builds:
            runs = results.get((model_name, name))
            if not runs:
                continue
            row = {n: statistics.median(r[str(n)] for r in runs) for n in BATCHES}
            base = base or row
            print(f"{model_name:<15} {name:<15}" + "".join(f"{row[n]:9.2f}" for n in BATCHES))
            if row is not base:
                print(f"{'':<15} {'  vs first':<15}" + "".join(f"{row[n] / base[n]:8.2f}x" for n in BATCHES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
