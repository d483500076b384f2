"""Regenerate and edit, measured: how much of a reply comes from the one it replaces.

    python tools/regenerate_bench.py [--max-tokens 128] [--prompts 3]

Per prompt, on the demo pair (threads 0, auto draft length, copying repeats on): a
first reply at temperature 0; then Regenerate (``ChatSession.reply(replaced=[old])``)
at temperature 0 and at 0.8, and the question slightly edited, each with and without
the old reply as a copy source. Prints tokens/s and the copied share (accepted copied
tokens / tokens) of each. Not a unit test: speeds depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout's app

from app.engine.types import SamplingConfig  # noqa: E402
from app.session.config import ModelSpec, speculation  # noqa: E402
from app.session.loading import load_session  # noqa: E402

PROMPTS = [
    ("Describe a walk through a forest in autumn.",
     "Describe a walk through a forest in late autumn."),
    ("Explain how a bicycle's gears make climbing hills easier.",
     "Explain how the gears on a bicycle make climbing hills easier."),
    ("Write a short note inviting neighbours to a street party on Saturday.",
     "Write a short note inviting the neighbours to a street party this Saturday."),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=len(PROMPTS))
    args = parser.parse_args()
    session = load_session(ModelSpec())
    spec = speculation(True, "auto")
    greedy, warm = SamplingConfig(), SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=1)
    rows: dict[str, list[tuple[float, float]]] = {}
    try:
        for question, edited in PROMPTS[:args.prompts]:
            session.copy_sources.clear()
            first = session.reply([("user", question)], greedy, spec, args.max_tokens)
            old = "".join(e.text for e in first)
            rows.setdefault("first reply, T=0", []).append(_figures(first))
            for label, history, sampling in (("regenerate, T=0", question, greedy),
                                             ("regenerate, T=0.8", question, warm),
                                             ("edited question, T=0", edited, greedy)):
                for with_old in (False, True):
                    session.copy_sources.clear()
                    generation = session.reply([("user", history)], sampling, spec, args.max_tokens,
                                               replaced=[old] if with_old else [])
                    generation.run()
                    name = f"{label}, {'old reply as source' if with_old else 'context only'}"
                    rows.setdefault(name, []).append(_figures(generation))
    finally:
        session.close()
    print(f"{'run':<48} {'tokens/s':>9} {'copied':>7}   (mean over {args.prompts} prompts, "
          f"{args.max_tokens} tokens)")
    for name, figures in rows.items():
        speed = sum(f[0] for f in figures) / len(figures)
        share = sum(f[1] for f in figures) / len(figures)
        print(f"{name:<48} {speed:>9.1f} {share:>7.0%}")
    return 0


def _figures(generation) -> tuple[float, float]:
    if not generation.stats.tokens:
        generation.run()
    stats = generation.stats
    return stats.tokens_per_second, stats.copied_accepted / stats.tokens if stats.tokens else 0.0


if __name__ == "__main__":
    sys.exit(main())
