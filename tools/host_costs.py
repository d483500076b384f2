"""Host work per speculative round, by vocabulary: the engine's own Python and numpy,
outside llama.cpp, measured with models that only hand over logits.

    python tools/host_costs.py                          # this tree, every vocabulary and mode
    python tools/host_costs.py --compare /path/to/landed/tree --json out.json

The real engine code runs (``SpeculativeEngine``, ``ModelDrafter``, ``TargetRows``, the
acceptance rules) with ``ReplayModel``s in place of llama.cpp: each "decode" writes
logits into the model's own buffer (a row of stored noise plus the continuation it
prefers), as llama.cpp does, and that writing is the model's time. Everything else in
a round -- copying the rows out, warping, sampling, acceptance, bookkeeping -- is host
time. So per round: host = wall - the two models' decode time; and host CPU = the
process's CPU seconds - that decode time (the decode is one busy thread, so its CPU
time is its wall time on a quiet machine; on a shared one wall time moves, CPU time less).

The logits are replayed, not computed: N(0, 2) noise with the preferred next token
22 above and a runner-up 17 above (the draft prefers the target's choice 6 times in 7), at 49,152 (SmolLM2,
the demo pair), 152,064 (Qwen 2.5 / 3) and 262,144 (Gemma 3) tokens. The host's cost
depends on the vocabulary's size and the sampler's settings, not on what the logits
mean. k = 8 drafted tokens a round; greedy and sampled (the app's chain: T 0.8,
top-k 40, top-p 0.95, min-p 0.05).

``--compare TREE`` runs the same measurement, in a fresh process, on another checkout
(e.g. ``git worktree add /tmp/landed 6158230``), one after the other per cell, and
prints both with the ratio. Not a test: figures need their machine and load stated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOCABS = {"49k": 49_152, "152k": 152_064, "262k": 262_144, "1k": 1_024}
SAMPLED = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)


CHILD = r"""
import json, sys, time
import numpy as np

vocab, mode, k, tokens, runs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sampled = json.loads(sys.argv[6])

from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig


class ReplayModel:
    # A model that hands over replayed logits: noise rows stored ahead, plus a spike at
    # the token it prefers after the previous one. Its decode writes into its own
    # buffer (timed: the "llama.cpp" part); ``evaluate`` copies rows out unless the
    # engine borrows them (the landed engine never asks).
    lends_logits = True
    keeps_states = False

    def __init__(self, n_vocab, seed, agree):
        rng = np.random.default_rng(seed)
        self.n_vocab, self.n_ctx = n_vocab, 1 << 20
        self.bos_id, self.eos_id, self.add_bos = 0, 1, False
        self.eog_ids, self.chat_template, self.name = frozenset(), None, "replay"
        self._noise = (rng.standard_normal((16, n_vocab)) * 2).astype(np.float32)
        self._agree = agree
        self._tokens = []
        self._buffer = np.empty((16, n_vocab), dtype=np.float32)
        self.decode_seconds = 0.0

    @property
    def tokens(self):
        return list(self._tokens)

    def _prefers(self, prev):
        t = (prev * 7919 + 13) % self.n_vocab
        if self._agree < 1.0 and (prev * 31) % 7 == 0:
            t = (t + 1) % self.n_vocab  # the draft disagrees here
        return t

    def evaluate(self, tokens, logits_at, borrow=False):
        started = time.perf_counter()  # (process_time is a system call here: 7 us)
        tokens = list(tokens)
        wanted = sorted(set(logits_at))
        for row, i in enumerate(wanted):
            prev = tokens[i]
            self._buffer[row] = self._noise[(prev + len(self._tokens) + i) % 16]
            self._buffer[row, self._prefers(prev)] += 22.0
            self._buffer[row, (prev * 104729 + 7) % self.n_vocab] += 17.0  # a runner-up
        self._tokens.extend(tokens)
        self.decode_seconds += time.perf_counter() - started
        rows = self._buffer[:len(wanted)]
        return rows if borrow else np.array(rows)

    def trim(self, n_keep):
        del self._tokens[n_keep:]

    def token_bytes(self, token_id):
        return b"x"

    def token_text(self, token_id):
        return "x"

    def tokenize(self, text, *, add_special, parse_special):
        return [2, 3]

    def close(self):
        pass


sampling = SamplingConfig(seed=1, **sampled) if mode == "sampled" else SamplingConfig(temperature=0.0)
spec = SpecConfig(draft_max=k, copy_min=0, tree="off")
prompt = list(range(10, 74))
out = []
for run in range(runs + 1):  # the first warms up
    target, draft = ReplayModel(vocab, 1, 1.0), ReplayModel(vocab, 2, 6 / 7)
    engine = SpeculativeEngine(target, ModelDrafter(draft, vocab))
    generation = engine.generate(prompt, sampling, spec, tokens)
    cpu, wall = time.process_time(), time.perf_counter()
    generation.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = generation.stats
    decode = target.decode_seconds + draft.decode_seconds  # the prompt's included: generate() is lazy
    if run:
        out.append({"rounds": stats.rounds, "drafted": stats.drafted, "tokens": stats.tokens,
                    "host_ms_per_round": 1000 * (wall - decode) / stats.rounds,
                    "host_cpu_ms_per_round": 1000 * (cpu - decode) / stats.rounds,
                    "acceptance": stats.acceptance})
print(json.dumps(out))
"""


def measure(tree: Path, vocab: int, mode: str, k: int, tokens: int, runs: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", CHILD, str(vocab), mode, str(k), str(tokens), str(runs),
                           json.dumps(SAMPLED)], capture_output=True, text=True, env=env, cwd=tree, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {mode} at {vocab} failed: {done.stderr[-2000:]}")
    records = json.loads(done.stdout.strip().splitlines()[-1])
    return {key: statistics.median(r[key] for r in records) for key in records[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", type=Path, default=None, help="another checkout to measure first (the landed code)")
    parser.add_argument("--vocabs", default=",".join(VOCABS), help="of " + ", ".join(VOCABS))
    parser.add_argument("--modes", default="greedy,sampled")
    parser.add_argument("-k", type=int, default=8, help="tokens drafted a round (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=200, help="tokens a run (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="runs a cell, the median kept (default: %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    trees = ([("landed", args.compare.resolve())] if args.compare else []) + [("this", ROOT)]
    rows = []
    for name in args.vocabs.split(","):
        for mode in args.modes.split(","):
            cell = {"vocab": name, "mode": mode}
            for label, tree in trees:
                cell[label] = measure(tree, VOCABS[name], mode, args.k, args.tokens, args.runs)
            rows.append(cell)
            line = f"{name:>5} {mode:8}"
            for label, _ in trees:
                m = cell[label]
                line += (f" | {label}: {m['host_ms_per_round']:6.2f} ms/round wall, {m['host_cpu_ms_per_round']:6.2f} CPU"
                         f" (acceptance {m['acceptance']:.2f}, {m['drafted'] / m['rounds']:.1f} drafted/round)")
            if args.compare:
                line += (f" | {cell['landed']['host_ms_per_round'] / cell['this']['host_ms_per_round']:.1f}x wall, "
                         f"{cell['landed']['host_cpu_ms_per_round'] / cell['this']['host_cpu_ms_per_round']:.1f}x CPU")
            print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
