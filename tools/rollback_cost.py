"""What a rollback costs on a recurrent or hybrid model, against a plain step
(docs/recurrent-models.md).

For each model: the median of a plain step (one token), of a verification batch of
``--batch`` tokens (with the checkpoint it saves before it, where it needs one) and of
the trim that follows it, keeping ``--keep`` of them (llama.cpp's snapshots where the
architecture has them, else a checkpoint restored and the kept tokens decoded again).
With ``--no-snapshots`` too, the snapshot architectures are measured without them.

    python tools/rollback_cost.py MODEL.gguf [MODEL.gguf ...] [--batch 5] [--keep 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.backends.llama.backend import LlamaBackend  # noqa: E402


def measure(path: str, batch: int, keep: int, rounds: int, snapshots: int | None, threads: int) -> dict:
    model = LlamaBackend(path, n_ctx=2048, n_threads=threads, rs_snapshots=snapshots)
    try:
        tokens = [1000 + (i * 7919) % 30000 for i in range(4096)]
        model.evaluate(tokens[:200], [])
        pos, plain, verify, trim = 200, [], [], []
        for _ in range(rounds):
            t = time.perf_counter()
            model.evaluate(tokens[pos:pos + 1], [0])
            plain.append(time.perf_counter() - t)
            pos += 1
            t = time.perf_counter()
            model.evaluate(tokens[pos:pos + batch], range(batch))
            verify.append(time.perf_counter() - t)
            t = time.perf_counter()
            model.trim(pos + keep)
            trim.append(time.perf_counter() - t)
            pos += keep
        return {"model": Path(path).name, "memory": model.memory, "snapshots": model.rs_snapshots,
                "plain_ms": 1000 * statistics.median(plain), "verify_ms": 1000 * statistics.median(verify),
                "trim_ms": 1000 * statistics.median(trim), "rollbacks": dict(model.rollbacks)}
    finally:
        model.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--keep", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-snapshots", action="store_true", help="also measure without llama.cpp's snapshots")
    args = parser.parse_args()
    print("| model | memory | snapshots | plain step ms | verify batch ms | trim ms | trim / plain step |")
    print("|---|---|---|---|---|---|---|")
    for path in args.models:
        for snapshots in ((None, 0) if args.no_snapshots else (None,)):
            r = measure(path, args.batch, args.keep, args.rounds, snapshots, args.threads)
            print(f"| {r['model']} | {r['memory']} | {r['snapshots']} | {r['plain_ms']:.2f} | {r['verify_ms']:.2f} "
                  f"| {r['trim_ms']:.2f} | {r['trim_ms'] / r['plain_ms']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
