"""Drafters propose the next few tokens; the target then checks them.

``ModelDrafter`` runs a small GGUF model. ``LookupDrafter`` needs no model: it
copies what followed the latest earlier occurrence of the last few tokens
(prompt lookup), which pays off when answers quote their prompt (code edits,
summaries, RAG). With a draft model the engine uses a stricter lookup first
(``SpecConfig.copy_min`` tokens must match) and drafts only where nothing repeats.

Both implement the one ``Drafter`` interface (``drafter_interface.py``), as do
lookahead (``lookahead.py``) and a draft of another vocabulary (``text_bridge.py``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import numpy as np

from app.engine.backend import ModelBackend, borrow_rows
from app.engine.speculation.constraints import Constraint, ConstraintError, constrained_argmax, constrained_dist, trim_to_constraint
from app.engine.speculation.copy_sources import CopySources
from app.engine.speculation.draft import Draft
from app.engine.speculation.drafter_interface import DrafterDefaults
from app.engine.speculation.peak import peak
from app.engine.speculation.sampling import runner_up, softmax_prob, warp_dist
from app.engine.speculation.sparse_dist import Dist
from app.engine.tokens import common_prefix
from app.engine.types import DrafterKind, SamplingConfig


# What the draft model reads (docs/speculative.md, "What the draft model reads"). It
# guesses the next few tokens and the target judges every one, so what it reads changes
# how often it is right, never the reply.
# - It keeps what it read: a prompt that extends what it holds (a chat's next turn, an
#   agent's history grown by a turn) is read from where its reading began, only what was
#   added. Its context is the target's size, so what it holds never has to move.
# - A prompt it holds little of (a new chat, another client's conversation) it reads
#   whole up to ``READ_WHOLE`` tokens, whatever the machine: every ordinary chat. Two
#   pasted texts and a request about the first (670 tokens) drafted from their last 256
#   tokens kept 0.56 of the draft's guesses against 0.93 read whole (sampled, demo pair:
#   tests/engine/speculation/test_acceptance_floors.py).
# - Of a longer one it reads the tail it reads in ``READ_BUDGET_S`` at its own measured
#   cost per token, at least ``TAIL_LEAST`` tokens (on a GPU, where reading costs next to
#   nothing, all of it). On a CPU a small draft reads a token about as slowly as the
#   target (the demo draft, Q4_1: 4.1 ms against the F32 target's 3.7), so all of a
#   3,500-token agent head would cost its first turn 12 s more; the tail costs 1 s.
READ_WHOLE = 1024
READ_BUDGET_S = 1.0
TAIL_LEAST = 256
_MEASURED_READ = 32  # a reading this long times the draft's cost per token


class ModelDrafter(DrafterDefaults):
    """Drafts with a small model whose vocabulary matches the target's. It keeps what it
    read; of a new prompt longer than ``reads_at_most`` tokens it reads the tail."""

    kind = DrafterKind.MODEL
    branches = True

    def __init__(self, model: ModelBackend, target_vocab: int, eog_ids: Sequence[int] = ()) -> None:
        self.model = model
        self.seconds = 0.0
        # The process's CPU clock for each step (``Draft.step_cpu_seconds``), which only a
        # thread chooser reads: the engine sets None where none does.
        self.cpu_clock: Callable[[], float] | None = time.process_time
        self._target_vocab = target_vocab
        # With ignore_eos the target never emits these, so drafting them is wasted.
        self._eog = np.array(sorted(eog_ids), dtype=np.int64)
        # Otherwise a drafted end ends the draft: accepted, the reply is over; rejected,
        # so is everything drafted after it. Either way more draft steps are wasted.
        self._eog_set = frozenset(eog_ids)
        self._offset = 0  # where the part of the context the draft reads begins
        self.read_cost: float | None = None  # seconds per token of its last long reading
        self._window: int | None = None  # a fixed window, where one was set

    @property
    def reads_at_most(self) -> int:
        """Of a new prompt longer than ``READ_WHOLE`` tokens, the tail it reads: what it
        reads in ``READ_BUDGET_S`` (its last long reading timed), at least ``TAIL_LEAST``."""
        if self._window is not None:
            return self._window
        if not self.read_cost:
            return TAIL_LEAST
        return max(TAIL_LEAST, int(READ_BUDGET_S / self.read_cost))

    @reads_at_most.setter
    def reads_at_most(self, tokens: int) -> None:
        self._window = tokens

    def _new_reading(self, length: int) -> int:
        """How much of a new prompt of ``length`` tokens it reads: all of an ordinary
        chat's, the tail of a longer one."""
        if length <= READ_WHOLE and self._window is None:
            return length
        return min(length, self.reads_at_most)

    def prepare(self, context: Sequence[int]) -> None:
        self._offset = self._start(context)
        pending = self._sync(context)
        if len(pending) > 1:
            started = time.perf_counter()
            self.model.evaluate(pending[:-1], [])
            spent = time.perf_counter() - started
            self.seconds += spent
            if len(pending) > _MEASURED_READ:
                self.read_cost = spent / (len(pending) - 1)

    def unread(self, context: Sequence[int]) -> int:
        context = context[self._start(context):]
        return len(context) - min(common_prefix(self.model.tokens, context), len(context) - 1)

    def propose(self, context: Sequence[int], n_max: int, sampling: SamplingConfig,
                rng: np.random.Generator, p_min: float,
                go_on: Callable[[float], bool] | None = None, constraint: Constraint | None = None,
                branch: Callable[[float], bool] | None = None, lines: int = 1) -> Draft:
        """As ``Drafter.propose``; under ``constraint`` the draft model drafts with its own
        fork of it; where ``branch(a token's probability)`` says so, a second candidate is
        kept beside it (``Draft.alternatives``). It drafts one line."""
        draft = Draft()
        n_max = min(n_max, self.model.n_ctx - (len(context) - self._offset))
        if n_max <= 0:
            return draft
        pending = self._sync(context)
        state = constraint.fork() if constraint is not None else None
        try:
            self._draft(draft, pending, n_max, sampling, rng, p_min, go_on, state, branch)
        finally:
            if state is not None:
                state.close()
        return draft

    def _draft(self, draft: Draft, pending: list[int], n_max: int, sampling: SamplingConfig,
               rng: np.random.Generator, p_min: float, go_on: Callable[[float], bool] | None,
               state: Constraint | None, branch: Callable[[float], bool] | None = None) -> None:
        clock = self.cpu_clock
        for _ in range(n_max):
            cpu, started = clock() if clock else 0.0, time.perf_counter()
            # A view of the model's own buffer where it lends one: read here, never kept.
            logits = self._fit_vocab(borrow_rows(self.model, pending, [len(pending) - 1])[0],
                                     sampling.ignore_eos)
            elapsed = time.perf_counter() - started
            self.seconds += elapsed
            if len(pending) <= 2:
                # [d_k, bonus] after a fully accepted round is this round's first draft
                # step, a little dearer: counted as one, it keeps the cost model honest.
                draft.step_seconds.append(elapsed)
                if clock:
                    draft.step_cpu_seconds.append(clock() - cpu)
            else:
                draft.catchup_seconds += elapsed
            try:
                token, prob, q, second = self._choose(logits, sampling, rng, state)
            except ConstraintError:  # the draft model sees nothing allowed: the target decides
                break
            if prob < p_min:
                draft.dropped = (token, prob)
                break
            if branch is not None and token not in self._eog_set and branch(prob):
                alternative = self._second(token, prob, q, rng, logits, second)
                if alternative is not None:
                    draft.alternatives[len(draft.tokens)] = alternative
            draft.tokens.append(token)
            draft.probs.append(prob)
            if q is not None:
                draft.q.append(q)
            else:
                draft.runner_ups.append(second)
            if token in self._eog_set or (go_on is not None and not go_on(prob)):
                break
            if state is not None:
                state.advance(token)
            pending = [token]

    def roll_back(self, committed: Sequence[int]) -> None:
        """Trim the cache to what the target kept (the next proposal would, first)."""
        if 0 <= self._offset < len(committed):
            context = committed[self._offset:]
            self.model.trim(min(common_prefix(self.model.tokens, context), len(context) - 1))

    def _sync(self, context: Sequence[int]) -> list[int]:
        """Trim the cache to its common prefix with ``context``; return what it has not seen.

        After a fully accepted round that is the last draft token and the target's
        bonus token: feeding both keeps the draft in step (forgetting the last draft
        token keeps the output right and quietly ruins acceptance: docs/ARCHITECTURE.md,
        "The speculative round", step 4).
        """
        if not 0 <= self._offset < len(context):
            self._offset = 0
        context = context[self._offset:]
        reuse = min(common_prefix(self.model.tokens, context), len(context) - 1)
        self.model.trim(reuse)
        # The next sync may come back to here: a recurrent model's steps leave no way
        # back by themselves, so it saves its state here (a no-op on attention).
        mark = getattr(self.model, "rollback_point", None)
        if mark is not None:
            mark()
        return list(context[reuse:])

    def _start(self, context: Sequence[int]) -> int:
        """Where the draft's reading of ``context`` begins. Where it began for the last
        prompt, while what it holds from there is still ``context``'s and what is left to
        read costs no more than a new reading would: so nothing it holds is read again,
        and a chat's draft sees all of it. Else, a new reading (``_new_reading``)."""
        old, held = self._offset, self.model.tokens
        if 0 <= old < len(context) and held:
            kept = common_prefix(held, context[old:old + len(held)])
            if kept and len(context) - old - kept <= self._new_reading(len(context)):
                return old
        return len(context) - self._new_reading(len(context))

    def _choose(self, logits: np.ndarray, sampling: SamplingConfig, rng: np.random.Generator,
                state: Constraint | None = None) -> tuple[int, float, Dist | None, int | None]:
        """(token, the drafter's probability of it, q when sampled, greedy: the runner-up)."""
        if sampling.greedy:
            # The token's softmax probability (unmasked: p_min and go_on judge the draft
            # model's confidence), from the logits near the top: one pass over the row.
            if state is None:
                token, prob, second = peak(logits)
            else:
                token = constrained_argmax(logits, state)
                prob, second = softmax_prob(logits, token), runner_up(logits, token)
            return token, prob, None, second
        # Under a constraint q is the masked distribution: what the token was drawn from.
        q = warp_dist(logits, sampling) if state is None else constrained_dist(logits, sampling, state)
        token = q.sample(rng)
        return token, q.prob(token), q, None

    def _second(self, first: int, prob: float, q: Dist | None, rng: np.random.Generator,
                logits: np.ndarray, second: int | None) -> tuple[int, float, Dist | None] | None:
        """A second candidate beside ``first`` (drawn with probability ``prob``): greedy,
        the runner-up ``second``; sampled, a draw from q without ``first`` (without
        replacement), with that distribution."""
        if q is None:
            if second is None:
                return None
            # Both softmax probabilities share one normaliser.
            return second, prob * float(np.exp(float(logits[second]) - float(logits[first]))), None
        rest = q.without((first,))
        if rest is None:
            return None
        rest = rest.normalised()
        token = rest.sample(rng)  # kept whatever it is: q given the first is exactly ``rest``
        return token, q.prob(token), rest

    def _fit_vocab(self, logits: np.ndarray, ignore_eos: bool) -> np.ndarray:
        """Draft logits over the target's vocabulary (sizes may differ by up to 128)."""
        n = self._target_vocab
        if logits.shape[0] != n:
            fitted = np.full(n, -np.inf, dtype=logits.dtype)
            m = min(n, logits.shape[0])
            fitted[:m] = logits[:m]
            logits = fitted
        if ignore_eos and self._eog.size:
            logits[self._eog] = -np.inf
        return logits

    def close(self) -> None:
        self.model.close()


class HeadDrafter(ModelDrafter):
    """Drafts with the target's own MTP head (``app/backends/llama/mtp_head.py``): a draft
    model whose cache lines up with the target's, position for position, and which reads
    the target's hidden rows beside the tokens. Everything a draft model's proposals do
    (sampled q, second candidates for trees, constraints) holds as it is.

    It reads all of a long prompt: it must (a position reads the target's row before it),
    and it is cheap (a head is one decoder block; the target has tens)."""

    kind = DrafterKind.MTP
    reads_at_most = 1 << 62


class EagleDrafter(HeadDrafter):
    """Drafts with an EAGLE-3 drafter file (``app/backends/llama/eagle_head.py``): a head
    trained on the target, in a file of its own, named as the draft model. It reads the
    inputs of three of the target's layers where an MTP head reads its last row."""

    kind = DrafterKind.EAGLE3


class LookupDrafter(DrafterDefaults):
    """Prompt lookup: propose what followed the latest earlier match of the last n tokens.

    The n-grams are indexed as the context grows (a few dict writes per new token),
    so a proposal costs the same after 100 tokens of chat as after 4,000.
    """

    kind = DrafterKind.LOOKUP
    copies_context = True

    def __init__(self, target_vocab: int, ngram_max: int = 3, ngram_min: int = 1,
                 eog_ids: Sequence[int] = ()) -> None:
        self.seconds = 0.0
        self._vocab = target_vocab
        self._ngram_max = ngram_max
        self.ngram_min = ngram_min
        # A copy ends before an end of turn: the target writes that token itself if it
        # means to, and copying past it would propose the next turn of an old chat.
        self._eog = frozenset(eog_ids)
        self._indexed: list[int] = []
        # n -> {n tokens: where what followed their latest occurrence starts}
        self._follows: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(ngram_min, ngram_max + 1)}

    def prepare(self, context: Sequence[int]) -> None:
        self._index(context)

    def propose(self, context: Sequence[int], n_max: int, sampling: SamplingConfig,
                rng: np.random.Generator, p_min: float,
                go_on: Callable[[float], bool] | None = None, constraint: Constraint | None = None,
                branch: Callable[[float], bool] | None = None, lines: int = 1) -> Draft:
        # The engine cuts a copy where a constraint refuses it (``constrained_draft``).
        # A copied continuation has no confidence to judge it by (each token's is 1): no cut.
        return self.copy(context, n_max, sampling)

    def copy(self, context: Sequence[int], n_max: int, sampling: SamplingConfig,
             sources: CopySources | None = None, own: bool = True, stretch_to: int = 0) -> Draft:
        """What followed the latest earlier match of the context's last tokens: in the
        context itself (``own``) or in ``sources``, whichever match reaches further back
        (a tie goes to the context, the conversation at hand). With ``stretch_to``, a
        match reaching far back copies further than ``n_max``: half its reach, up to
        ``stretch_to`` (SuffixDecoding's rule: a long match is likely to go on)."""
        started = time.perf_counter()
        found: tuple[Sequence[int], int] | None = None
        if own:
            self._index(context)
            for n in range(self._ngram_max, self.ngram_min - 1, -1):
                start = self._follows[n].get(tuple(context[-n:])) if len(context) > n else None
                if start is not None:
                    found = (context, start)
                    break
        reach = _reach(*found, context) if found else 0
        other: tuple[Sequence[int], int] | None = None
        if sources is not None:
            elsewhere = sources.find(context)
            if elsewhere is not None and (further := _reach(*elsewhere, context)) > reach:
                other, other_reach = found, reach
                found, reach = elsewhere, further
            elif elsewhere is not None:
                other, other_reach = elsewhere, _reach(*elsewhere, context)
        if not found:
            return self.draft_of([], sampling, started)
        draft = self.draft_of(self._copy(*found, max(n_max, min(stretch_to, reach // 2))), sampling, started)
        if other is not None:
            # The other place to copy from, where it says something else: a token tree
            # can verify both (the engine decides whether it does).
            copied = self._copy(*other, max(n_max, min(stretch_to, other_reach // 2)))
            if copied and copied[:len(draft.tokens)] != draft.tokens[:len(copied)]:
                draft.other_copies.append(copied)
        return draft

    def draft_of(self, tokens: list[int], sampling: SamplingConfig, started: float) -> Draft:
        """``tokens`` as a deterministic draft (one-hot q when sampled), timed from ``started``."""
        draft = Draft(tokens=tokens, probs=[1.0] * len(tokens))
        if tokens:
            draft.step_seconds = [(time.perf_counter() - started) / len(tokens)] * len(tokens)
        if not sampling.greedy:
            # A deterministic proposal is a one-hot q: the rejection rule then
            # keeps d with probability p(d) and resamples from p without d.
            draft.q.extend(Dist.point(token, self._vocab) for token in tokens)
        return draft

    def _copy(self, context: Sequence[int], start: int, n_max: int) -> list[int]:
        copied = []
        for token in context[start:start + n_max]:
            if token in self._eog:
                break
            copied.append(token)
        return copied

    def _index(self, context: Sequence[int]) -> None:
        """Bring the n-gram index up to ``context``: extend it, or rebuild it when the
        context is not a continuation of what was indexed (another chat, an edit)."""
        kept = common_prefix(self._indexed, context)
        if kept < len(self._indexed):
            kept = 0
            self._indexed = []
            for follows in self._follows.values():
                follows.clear()
        # Only positions with a token after them: the context's own tail never matches itself.
        for i in range(max(kept, self.ngram_min), len(context)):
            for n, follows in self._follows.items():
                if i >= n:
                    follows[tuple(context[i - n:i])] = i
        self._indexed.extend(context[kept:])

    def close(self) -> None:
        pass


REACH_MOST = 64  # how far back two matches are compared (a longer match is rarely a closer one)


def _reach(source: Sequence[int], start: int, context: Sequence[int]) -> int:
    """How many tokens before ``source[start]`` equal the context's last ones (the match
    that found ``start`` and beyond it, up to REACH_MOST)."""
    n = 0
    while n < REACH_MOST and n < start and n < len(context) and source[start - 1 - n] == context[-1 - n]:
        n += 1
    return n


def constrained_draft(draft: Draft, constraint: Constraint) -> Draft:
    """``draft`` cut before its first token ``constraint`` refuses: the target could keep
    none of what follows. The time it took stays counted."""
    kept = trim_to_constraint(draft.tokens, constraint)
    if len(kept) == len(draft.tokens):
        return draft
    n = len(kept)
    return dataclasses.replace(draft, tokens=kept, q=draft.q[:n], probs=draft.probs[:n], dropped=None)

