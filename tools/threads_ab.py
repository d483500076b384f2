"""Adaptive threads against a fixed count, inside one process: plain decoding.

    python tools/threads_ab.py [--prompts FILE] [--limit 8] [--rounds 3] [--max-tokens 96] [--fixed N]

One loaded pair (threads 0, so the target's chooser is live), and per prompt two plain
greedy replies, one with the adaptive chooser and one with it set aside and the target
held at ``--fixed`` threads (default: as many as it loaded with), in an order that
alternates prompt by prompt. Runs in separate processes drift apart by more than the
few percent being compared (loading, page cache, the machine's own clock); here both
share the models, the cache and the minute. The adaptive chooser keeps what it learnt
from one reply to the next, as in the app. Prints tokens/s of each and their ratio.
Not a unit test: speeds depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout's app

from app.bench.speedup import DEFAULT_PROMPTS, read_prompts  # noqa: E402
from app.cli.main import build_parser  # noqa: E402
from app.engine.speculation import thread_policy  # noqa: E402
from app.engine.prompting.chat import build_messages, chat_tokens  # noqa: E402
from app.engine.types import SamplingConfig, SpecConfig  # noqa: E402
from app.terminal.shared import TerminalProgress, load  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS)
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--fixed", type=int, default=0, help="the fixed count (default: the loaded one)")
    opts = parser.parse_args()

    session = load(build_parser().parse_args(["bench"]), TerminalProgress())
    try:
        engine, target = session.engine, session.target
        adaptive, loaded = engine.threads, target.threads
        fixed = opts.fixed or loaded
        prompts = [chat_tokens(target, build_messages([("user", p.text)]))
                   for p in read_prompts(opts.prompts, opts.limit, None)]
        seconds = {"adaptive": [], "fixed": []}
        for round_ in range(opts.rounds):
            for i, tokens in enumerate(prompts):
                for mode in (("adaptive", "fixed") if (i + round_) % 2 == 0 else ("fixed", "adaptive")):
                    if mode == "fixed":
                        kept = target.threads
                        engine.threads = thread_policy.FIXED
                        target.set_threads(fixed)
                    else:
                        engine.threads = adaptive
                    generation = engine.generate(tokens, SamplingConfig(temperature=0.0),
                                                 SpecConfig(enabled=False), opts.max_tokens)
                    generation.run()
                    seconds[mode].append(generation.stats.seconds / max(generation.stats.tokens, 1))
                    if mode == "fixed":
                        target.set_threads(kept)  # the chooser's count, as it left it
            print(f"round {round_ + 1}: target on {target.threads} threads after the adaptive runs", file=sys.stderr)
    finally:
        session.close()
    a, f = statistics.mean(seconds["adaptive"]), statistics.mean(seconds["fixed"])
    paired = statistics.median(x / y for x, y in zip(seconds["fixed"], seconds["adaptive"]))
    print(f"plain tok/s: adaptive {1 / a:.2f}, fixed {fixed} threads {1 / f:.2f}; "
          f"adaptive / fixed {f / a:.3f} (paired median {paired:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
