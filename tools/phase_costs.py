"""What each phase of a long-prompt turn costs, for one model, one context shape:
reading the prompt, then a verification batch and a plain step after it.

    python tools/phase_costs.py MODEL.gguf [--flash-attn auto|on|off] [--batch 512]
                                [--prompt-tokens 3000] [--verify 9] [--repeats 10]

Flash attention, the batch (and ubatch) size and the threads are fixed when a context is
made, and one context serves every phase of a turn, so a choice that reads prompts faster
may verify drafts slower: run it once per choice and compare the whole turn (a prompt
read once, then a few dozen verifications). The prompt is random tokens, read with no
logits as Tandem reads one; each verification and step is cut back after it. Prints
seconds and median milliseconds. Not a test: figures need a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import app.backends.llama.backend as llama_backend  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--batch", type=int, default=llama_backend.BATCH, help="batch and ubatch size")
    ap.add_argument("--prompt-tokens", type=int, default=3000)
    ap.add_argument("--verify", type=int, default=9, help="tokens in a verification batch")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="0: Tandem's default")
    ap.add_argument("--n-ctx", type=int, default=8192)
    a = ap.parse_args()
    llama_backend.BATCH = a.batch  # the context's batch: read when the context is made
    model = llama_backend.LlamaBackend(a.model, n_ctx=a.n_ctx, flash_attention=a.flash_attn,
                                       n_threads=a.threads)
    tokens = [int(t) for t in np.random.default_rng(0).integers(100, min(20_000, model.n_vocab), a.prompt_tokens)]
    started = time.perf_counter()
    model.evaluate(tokens, [])
    read = time.perf_counter() - started

    def batch(n: int) -> float:
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            model.evaluate(tokens[:n], list(range(n)))
            times.append(time.perf_counter() - t)
            model.trim(a.prompt_tokens)
        return statistics.median(times) * 1000

    verify, step = batch(a.verify), batch(1)
    print(f"{Path(a.model).name}: flash attention {a.flash_attn}, batch {a.batch}, {model.threads} threads: "
          f"reading {a.prompt_tokens} tokens {read:.2f} s ({read / a.prompt_tokens * 1000:.2f} ms a token); "
          f"after it, verifying {a.verify} tokens {verify:.1f} ms, one step {step:.1f} ms")
    model.close()


if __name__ == "__main__":
    main()
