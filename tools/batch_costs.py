"""What a verification batch costs against one plain step, by batch size, for one model.

    python tools/batch_costs.py MODEL.gguf [--sizes 1,2,3,5,9] [--context 40] [--repeats 5]

Speculation pays only where checking n tokens in one batch costs much less than n plain
steps, and a drafted token costs much less than a plain step. Both depend on the
machine and on the weights' type, so this measures the first: after a prompt of
``--context`` random tokens, batches of each size are evaluated (logits at every
position, as a verification asks) and cut back, sizes interleaved, ``--repeats`` times.
It prints the median milliseconds and the ratio to one token. Run it on the draft too
for its step cost. Not a test: figures need a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.backends.llama.backend import LlamaBackend  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--sizes", default="1,2,3,5,9")
    ap.add_argument("--context", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]

    model = LlamaBackend(a.model, n_ctx=a.context + max(sizes) + 16, n_threads=a.threads)
    tokens = [int(t) for t in np.random.default_rng(0).integers(300, min(20_000, model.n_vocab), a.context + max(sizes))]
    model.evaluate(tokens[:a.context], [a.context - 1], borrow=True)
    seconds: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(a.repeats):
        for n in sizes:
            started = time.perf_counter()
            model.evaluate(tokens[a.context:a.context + n], list(range(n)), borrow=True)
            seconds[n].append(time.perf_counter() - started)
            model.trim(a.context)
    model.close()
    one = statistics.median(seconds[min(sizes)])
    print(f"{Path(a.model).name}, after {a.context} tokens, {a.threads} threads (median of {a.repeats}):")
    for n in sizes:
        ms = 1000 * statistics.median(seconds[n])
        print(f"  {n:3d} tokens: {ms:7.1f} ms  ({ms / (1000 * one):.2f} of {min(sizes)})")


if __name__ == "__main__":
    main()
