"""Lookahead decoding: a drafter for a target with no draft model (``--drafter lookahead``,
``tandem bench --method lookahead``; Fu et al., "Break the Sequential Dependency of LLM Inference Using
Lookahead Decoding", 2024; llama.cpp's ``examples/lookahead``).

The target's verification batch also carries a **Jacobi window**: W columns of N - 1
levels of guessed tokens. Column i's level j sits at position ``i + j`` after the last
committed token (the root), and sees the root, level 0 of columns 1 .. i, and levels
1 .. j of its own column: a tree whose trunk is level 0 and whose column i hangs off
trunk node i (``JacobiWindow.hang``). The target's argmax after each column's last level
is a new guess for the position after it. Each round the levels move up one (the
Jacobi step: every guess keeps its absolute position while the root moves one on),
the outputs become the last level, and each column read top to bottom, with its
output, is an n-gram whose every token the target wrote after the ones before it.
Those n-grams go into a pool keyed by their first token (``NgramPool``), which keeps the
latest ``POOL_PER_KEY`` distinct ones per first token.

Drafting (``LookaheadDrafter.propose``) is then copying twice over: prompt lookup in
the context, as ``LookupDrafter`` does (matching at least two tokens), and the pool's
n-grams that start with the context's last token, each continued through the pool up to
the round's length; a copy, where there is one, comes first. With the window riding,
the first line is the draft and the pool's other lines that differ are branches beside
it, in the sequences the window leaves free (of ``TREE_BRANCHES`` = 8: ``WINDOW`` = 5
for the window, 3 for guesses). Every guess is verified like any draft: the pool's and the window's are made
from earlier rounds' rows, never the current round's, and are deterministic (one-hot q),
so the reply is the target's own: greedy, identical to the target alone; sampled, by
the exact rejection rules over siblings (``token_tree.py``). The walk may even keep
window tokens, but only where the whole window fits what the reply may still write; the
backend keeps the accepted path, one sequence after the round, as for every tree.

The window adds W (N - 1) - 1 = 14 tokens to every batch (``JacobiWindow.size``: its
first cell is the round's own last token). On a GPU a wide batch costs about what a
single token does; on a CPU it does not, so ``LookaheadPolicy`` measures what rounds
with the window yield per second against rounds without, and stops carrying the window where it does not pay,
probing now and then (its docstring has the schedule). The verdict is
``Stats.lookahead_note`` ("lookahead does not pay here: ... tokens/s with its window,
... without"); the bench prints it and puts it in its JSON (``lookahead``). Without the
window the pool still drafts, from what it learnt. The window does not ride under a
grammar or with logprobs (those follow one line of rows), on a target without trees, or
where the context has no room for it (``SpeculativeEngine._window``).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np

from app.engine.speculation.constraints import Constraint
from app.engine.speculation.draft import Draft
from app.engine.speculation.drafter_interface import DrafterDefaults, RoundOutcome
from app.engine.speculation.drafters import LookupDrafter
from app.engine.speculation.probes import ProbeBackoff, rate
from app.engine.speculation.token_tree import TokenTree
from app.engine.speculation.tree_round import TreeRound
from app.engine.types import DrafterKind, SamplingConfig, Stats

WINDOW = 5          # W: columns of the Jacobi window
NGRAM = 4           # N: tokens of an n-gram (the window has N - 1 levels)
POOL_PER_KEY = 4    # G: n-grams the pool keeps per first token (the latest ones)

LookaheadMode = Literal["auto", "on", "off"]


class NgramPool:
    """N-grams by their first token: the latest ``per_key`` distinct ones, newest first."""

    def __init__(self, per_key: int = POOL_PER_KEY) -> None:
        self.per_key = per_key
        self._grams: dict[int, list[tuple[int, ...]]] = {}
        self.added = 0

    def __len__(self) -> int:
        return sum(len(grams) for grams in self._grams.values())

    def add(self, first: int, rest: Sequence[int]) -> None:
        rest = tuple(int(t) for t in rest)
        grams = self._grams.setdefault(int(first), [])
        if rest in grams:
            grams.remove(rest)  # seen again: it becomes the newest
        else:
            self.added += 1
        grams.insert(0, rest)
        del grams[self.per_key:]

    def after(self, token: int) -> list[tuple[int, ...]]:
        return self._grams.get(int(token), [])

    def line(self, token: int, gram: tuple[int, ...], n_max: int, stop: frozenset[int]) -> list[int]:
        """``gram`` continued through the pool (each time the newest n-gram after its last
        token) up to ``n_max`` tokens, ending before a token of ``stop``."""
        line: list[int] = []
        while len(line) < n_max:
            for t in gram:
                if t in stop or len(line) >= n_max:
                    return line
                line.append(t)
            following = self.after(line[-1]) if line else []
            if not following:
                break
            gram = following[0]
        return line


class JacobiWindow:
    """W columns of N - 1 levels of guesses, one Jacobi iteration a round."""

    def __init__(self, seed: Sequence[int], width: int = WINDOW, ngram: int = NGRAM) -> None:
        if width < 1 or ngram < 2:
            raise ValueError("a lookahead window needs a column and an n-gram of two tokens")
        self.width, self.levels = width, ngram - 1
        seed = list(seed) or [0]
        # Any guess will do to start with (llama.cpp's uses 100 + i); the context's own
        # tokens are at least words of this text.
        n = width * self.levels
        tokens = [int(seed[(len(seed) - n + k) % len(seed)]) for k in range(n)]
        self.grid = [tokens[j * width:(j + 1) * width] for j in range(self.levels)]  # grid[level][column]
        self._root: int | None = None
        self._ends: list[int] = []

    @property
    def size(self) -> int:
        """Nodes it adds to a tree (the root is the round's own)."""
        return self.width * self.levels - 1

    @property
    def depth(self) -> int:
        """Its deepest node's distance from the root."""
        return self.width - 1 + self.levels - 1

    def hang(self, tree: TokenTree) -> None:
        """Add the window below the tree's root (merged with guesses already there where
        they agree: the same token after the same path is the same computation)."""
        self._root = tree.tokens[0]
        trunk = [0, *tree.add_path(0, self.grid[0][1:])]
        self._ends = []
        for column in range(self.width):
            below = tree.add_path(trunk[column], [self.grid[j][column] for j in range(1, self.levels)])
            self._ends.append(below[-1] if below else trunk[column])

    def advance(self, rows: np.ndarray, emitted: int, pool: NgramPool) -> None:
        """After the batch: the target's argmax after each column is its n-gram's last
        token and the column's new last level; the levels move up one, and the columns
        left ``emitted - 1`` more (the root moved on by ``emitted``), so every guess keeps
        its position. The columns pushed out come back at the end, as guesses."""
        outputs = [int(t) for t in rows[self._ends].argmax(axis=1)]
        for column in range(self.width):
            first = self._root if column == 0 else self.grid[0][column]
            pool.add(first, [self.grid[j][column] for j in range(1, self.levels)] + [outputs[column]])
        self.grid = self.grid[1:] + [outputs]
        shift = min(max(emitted - 1, 0), self.width - 1)
        if shift:
            self.grid = [level[shift:] + level[:shift] for level in self.grid]


@dataclass
class LookaheadRound(TreeRound):
    """A tree round whose batch also carries the Jacobi window: the guesses (a copy, the
    pool's n-grams) come first, the window after them."""

    guesses: int = 0  # the tree's nodes before the window's
    teaches_policy = False  # the window is not the draft-length policy's to judge

    def main_accepted(self, path: list[int]) -> int:
        """How much of the main guess the target kept (the window is not a guess of it)."""
        line, tokens, n = self.tree.first_chain(0), self.main.tokens, 0
        while (n < len(tokens) and n < len(line) and n + 1 < len(path) and path[n + 1] == line[n]
               and self.tree.tokens[line[n]] == tokens[n]):
            n += 1
        return n


def lookahead_round(last: int, draft: Draft, window: JacobiWindow) -> LookaheadRound:
    """The round's tree: the draft (its first line, then the pool's other n-grams that
    differ), then the window."""
    tree = TokenTree.rooted_at(last)
    tree.add_path(0, draft.tokens)
    for other in draft.other_copies:
        tree.add_path(0, other)
    guesses = len(tree) - 1
    window.hang(tree)
    return LookaheadRound(tree, draft, {}, guesses)


class LookaheadPolicy:
    """Carry the window or not: tokens per second of rounds with it against rounds without.

    Rounds without it are plain steps, copies and the pool's n-grams as a line; until
    three are measured, a plain step (one token) stands for them, and where none was
    measured either the policy runs rounds without the window to learn. It is judged after
    ``WARMUP`` rounds with it, and dropped after ``OFF_AFTER`` verdicts in a row that it
    does not pay; then after ``PROBE_EVERY`` rounds it rides once more, and again after
    twice as many each time it still does not pay (up to ``PROBE_MOST``), so the verdict
    follows the machine (a GPU, another program's load) while a window that costs many
    steps (a batch of 24 is 18 steps on a CPU) costs almost nothing once it is known. ``mode`` "on" / "off" decides
    without measuring."""

    WARMUP = 8
    OFF_AFTER = 4
    PROBE_EVERY = 32
    PROBE_MOST = 1024
    KEEP = 31  # rounds of each kind the rates are taken over

    def __init__(self, mode: LookaheadMode = "auto") -> None:
        self.mode = mode
        self._with: deque[tuple[int, float]] = deque(maxlen=self.KEEP)
        self._without: deque[tuple[int, float]] = deque(maxlen=self.KEEP)
        self._votes = 0
        self._probes = ProbeBackoff(self.PROBE_EVERY, self.PROBE_MOST)
        self._plain_seconds: float | None = None
        self.off = mode == "off"
        self.note = "lookahead is off" if self.off else ""

    @property
    def _probe_every(self) -> int:  # the spacing of probes now (tests read it)
        return self._probes.every

    def carry(self, plain_seconds: float | None) -> bool:
        """Does this round's batch carry the window? (Ask once a round.)"""
        if self.mode != "auto":
            return self.mode == "on"
        self._plain_seconds = plain_seconds
        if len(self._with) >= self.WARMUP:
            on, off = self.rates(plain_seconds)
            if off is None:
                return False  # nothing to set it against yet: measure a round without it
            if on < off:
                self._votes += 1
                if self._votes >= self.OFF_AFTER and not self.off:
                    self.off = True
                    self.note = (f"lookahead does not pay here: {on:.1f} tokens/s with its window, "
                                 f"{off:.1f} without; off, tried again after {self.PROBE_EVERY} rounds, "
                                 "then less often")
            else:
                self._votes, self.off, self.note = 0, False, ""
                self._probes.reset()
        return not self.off or self._probes.due()

    def rates(self, plain_seconds: float | None) -> tuple[float, float | None]:
        """Tokens per second with the window and without (None: nothing to judge by)."""
        on = rate(self._with)
        off = rate(self._without) if len(self._without) >= 3 else (
            1.0 / plain_seconds if plain_seconds else None)
        return on, off

    def observe(self, carried: bool, tokens: int, seconds: float) -> None:
        """A round: whether it carried the window, the tokens it wrote and what it took."""
        (self._with if carried else self._without).append((tokens, max(seconds, 1e-9)))
        if carried and self._probes.probing:
            # A probe is judged on its own round: the rounds kept from before it would
            # outvote a machine that changed. One that pays turns the window back on, to
            # be judged again after the warm-up on fresh rounds.
            self._probes.probing = False
            off = self.rates(self._plain_seconds)[1]
            if off is not None and tokens / max(seconds, 1e-9) >= off:
                self._with.clear()
                self._with.append((tokens, max(seconds, 1e-9)))
                self._votes, self.off, self.note = 0, False, ""
                self._probes.reset()


class WindowRider:
    """The Jacobi window as the round's rider: hung after the guess in the round's tree,
    and advanced by what the target says of it (its outputs feed the pool)."""

    def __init__(self, window: JacobiWindow, pool: NgramPool) -> None:
        self.window, self.pool = window, pool
        self.width = window.width

    def shape(self, last: int, draft: Draft) -> LookaheadRound:
        return lookahead_round(last, draft, self.window)

    def advance(self, rows: np.ndarray, emitted: int) -> None:
        self.window.advance(rows, emitted, self.pool)


class LookaheadDrafter(DrafterDefaults):
    """Copies from the context and from the target's own n-gram pool; the engine carries
    its Jacobi window in the verification batch while ``policy`` says it pays."""

    kind = DrafterKind.LOOKAHEAD
    copies_context = True

    def __init__(self, target_vocab: int, eog_ids: Sequence[int] = (), mode: LookaheadMode = "auto",
                 width: int = WINDOW, ngram: int = NGRAM, copy: bool = True) -> None:
        self.seconds = 0.0
        self.pool = NgramPool()
        self.policy = LookaheadPolicy(mode)
        self._width, self._ngram = width, ngram
        self._eog = frozenset(eog_ids)
        # Prompt lookup, matching at least two tokens: a single token's earlier
        # occurrence is a weaker guess than the pool's n-grams after it.
        self._lookup = LookupDrafter(target_vocab, ngram_max=3, ngram_min=2, eog_ids=eog_ids)
        self._copies = copy  # False: the pool alone (to tell what it yields)
        self.window: JacobiWindow | None = None

    def prepare(self, context: Sequence[int]) -> None:
        self._lookup.prepare(context)
        # The pool lasts from reply to reply (the target's n-grams stay true); the window
        # starts again from this context.
        self.window = JacobiWindow(context, self._width, self._ngram)

    def propose(self, context: Sequence[int], n_max: int, sampling: SamplingConfig,
                rng: np.random.Generator, p_min: float,
                go_on: Callable[[float], bool] | None = None, constraint: Constraint | None = None,
                branch: Callable[[float], bool] | None = None, lines: int = 1) -> Draft:
        """A copy from the context if its last tokens occurred before, else the pool's
        newest n-gram after the last token (continued through the pool); with ``lines``
        above one, up to that many lines in all, the others as ``Draft.other_copies``
        (a tree can verify them together)."""
        started = time.perf_counter()
        draft = self._lookup.copy(context, n_max, sampling) if self._copies else Draft()
        candidates = [self.pool.line(context[-1], gram, n_max, self._eog) for gram in self.pool.after(context[-1])]
        candidates = [line for line in candidates if line]
        if not draft.tokens and candidates:
            draft = self._lookup.draft_of(candidates.pop(0), sampling, started)
        for line in candidates:
            if len(draft.other_copies) + 1 >= lines:
                break
            if line[:len(draft.tokens)] != draft.tokens[:len(line)]:
                draft.other_copies.append(line)
        self.seconds += time.perf_counter() - started
        return draft

    def rider(self, room: int, branches: int, plain_seconds: float | None) -> WindowRider | None:
        """The window, where the batch has branches to spare for it and whatever the
        walk keeps of it fits the reply's ``room``, and the policy says it pays."""
        window = self.window
        if window is None or branches <= window.width or window.depth > room - 1:
            return None
        return WindowRider(window, self.pool) if self.policy.carry(plain_seconds) else None

    def observe(self, outcome: RoundOutcome, stats: Stats) -> None:
        # Every round teaches the policy: those without the window are what it is set against.
        self.policy.observe(outcome.carried, outcome.written, outcome.seconds)
        stats.lookahead_rounds += outcome.carried

    def report(self, stats: Stats) -> None:
        stats.lookahead_note = self.policy.note
