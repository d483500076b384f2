"""The speculative loop: draft -> verify -> accept -> roll back -> account
(docs/ARCHITECTURE.md, "The speculative round").

One round (``_run``): draft (``_draft``: a copy where the last ``copy_min`` tokens
repeat, else the drafter's proposal, as the draft policy plans) -> verify (``_verify``:
one target batch, logits at k + 1 positions) -> accept (``_accept``: ``sampling.py``;
trees through ``token_tree.py``) -> roll back (the target trimmed to the committed
tokens; the drafter forgets the rest) -> account (``_account``: the stats, the policy,
the thread chooser, and the drafter's own ``observe``). The loop speaks to every drafter
through one interface (``drafter_interface.py``) and never asks which kind it holds: a
new drafter implements the interface and needs no edit here.

The prompt (``_prefill``): the target reads it, its last token on its own and with its
logits, which give the reply's first token as plain decoding's first step would (as in
llama.cpp's ``speculative-simple``): the first token waits for nothing else. The drafter
reads the prompt after it (``_read_later``) and drafts from the second round on.

Invariants, checked below:
- before a round the target's cache holds every committed token but the last;
  the round evaluates ``[last, d1 .. dk]`` in one batch, with logits at those
  k+1 positions only, and emits at least one token;
- after it, the cache is trimmed to the committed tokens but the (new) last, so
  rejected drafts leave no trace. The draft model re-syncs to the committed
  tokens at the start of its next proposal (see ``ModelDrafter.propose``).

Copying repeats (``SpecConfig.copy_min``): when the last few committed tokens
occurred earlier, what followed them there is the round's guess instead of the
draft model's. It is verified like any draft (greedy or by the rejection rule,
with a one-hot q), so it stays lossless; it costs no draft steps, and the draft
model catches up on the accepted part in one batch at its next proposal. Since it
costs no draft steps, it is tried even in a round the policy plans as a plain step,
and with ``draft_max="auto"`` a match that reaches far back copies further than the
round's plan (half the match's length, up to ``COPY_MOST``); a fixed length is kept.
``generate(copy_sources=...)`` adds what the user already has to copy from (the reply
a regeneration replaces, other chats: ``copy_sources.CopySources``), judged the same way.

Acceptance (``sampling.py``): greedy keeps d_i while it equals the target's
argmax; sampled keeps d_i with probability min(1, p(d_i)/q(d_i)) and on the first
rejection draws from norm(max(0, p - q)), so every emitted token is distributed
exactly as the target alone would draw it.

Constraints (``constraints.py``, ``target_rows.py``): under a grammar, every row's
distribution is masked by the grammar's state at that row, by the same function as
plain decoding; the draft model drafts under its own fork of it, and a draft is cut
where the grammar would refuse it, so no forbidden token is ever kept.

Draft lengths (``draft_policy.py``): a reply is handed one policy, a fixed length
or auto, which plans each round and learns from what it cost and what was kept.
Copies teach it nothing: they say nothing about the draft model's guesses.

Token trees (``tree_round.py``): where the plan asks for branches and the target
verifies trees, the round's guess may be a tree (a second candidate beside an unsure
draft token, a second copy that disagrees), verified in one batch and accepted by
recursive rejection over siblings; the backend keeps the accepted path, so the
invariants below hold for trees as for lines.

Lookahead (``lookahead.py``): a drafter with no model copies from the context and from
the target's own n-gram pool; while its policy says the wider batch pays, the round's
tree also carries its Jacobi window, whose outputs feed the pool. The window's nodes
are deterministic guesses like the rest, so the walk may even keep some.

Text (``text_bridge.py``): a draft model of another vocabulary drafts in its own tokens;
their text, in the target's tokens, is the round's guess, a fixed sequence verified as a
copy is. Its policy turns it off where a round through text does not beat a plain step.

Threads (``thread_policy.py``): where the user left the thread count to the engine,
the step costs measured for the draft policy also choose each model's thread count,
fewer while another program keeps a core busy; only how fast a step runs changes.

Text (``detokenize.py``): a character can span tokens, so each event carries the
characters its token completed; a reply that ends mid-character gives what is
left to its last token (U+FFFD) rather than dropping it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from app.engine.backend import ModelBackend, borrow_rows, borrow_tree
from app.engine.errors import ContextOverflowError
from app.engine.speculation.constraints import Constraint
from app.engine.speculation.copy_sources import CopySources
from app.engine.speculation.detokenize import StreamingDetokenizer, token_display_text
from app.engine.speculation.draft_costs import RecentCost
from app.engine.speculation.draft_policy import AutoDraftLength, DraftPolicy, RoundPlan, draft_policy
from app.engine.speculation.draft import Draft
from app.engine.speculation.drafter_interface import Drafter, DrafterDefaults, Rider, RoundOutcome
from app.engine.speculation.drafters import LookupDrafter, constrained_draft
from app.engine.speculation.target_rows import TargetRows
from app.engine.speculation.thread_policy import threads_for
from app.engine.speculation.tree_round import TreeRound, branch_for, grow_tree, grows_trees
from app.engine.tokens import common_prefix
from app.engine.types import SPECULATION_OFF, SamplingConfig, SpecConfig, Stats, StopReason, TokenEvent, TokenKind


COPY_WHEN_PLAIN = 8  # tokens a copy may take in a round the policy plans as a plain step
COPY_MOST = 16       # with auto, a match reaching 2n tokens back may copy n, up to this
PAUSE_EVERY = 512    # prompt tokens evaluated between two calls of generate's ``pause``


class Generation:
    """An iterator of TokenEvents; ``stats`` is filled in as it runs."""

    def __init__(self, events: Iterator[TokenEvent], stats: Stats) -> None:
        self._events = events
        self.stats = stats

    def __iter__(self) -> Iterator[TokenEvent]:
        return self._events

    def run(self) -> list[TokenEvent]:
        return list(self._events)


class _NoDrafter(DrafterDefaults):
    """The drafter of a reply that does not speculate: it is never asked to propose."""

    seconds = 0.0

    def prepare(self, context: Sequence[int]) -> None:
        pass


@dataclass
class _Reply:
    """What holds for every round of one reply."""

    drafter: Drafter
    sampling: SamplingConfig
    spec: SpecConfig | None          # None: no speculation
    policy: DraftPolicy
    max_tokens: int
    cancel: threading.Event
    detok: StreamingDetokenizer
    stats: Stats
    sources: CopySources | None
    constraint: Constraint | None
    logprobs: int | None
    rng: np.random.Generator
    masked: np.ndarray | None        # ignore_eos: the end-of-generation ids, never emitted
    # The process's CPU clock where a thread chooser reads it: on a virtual machine each
    # reading is a system call (7 us), and a round makes k + 2.
    clock: Callable[[], float] | None
    # This reply's verifications of two tokens or more, by size (Stats.plain_step_seconds).
    batch_steps: dict[int, RecentCost] = field(default_factory=dict)
    # The drafter reads the prompt once the first token is out.
    reads_later: bool = True
    proposed_last: int = 0           # tokens the drafter proposed last round (0: it did not)

    @property
    def trees(self) -> bool:
        """Whether a round may be a tree: nothing but the acceptance rule judges a token
        (a grammar and logprobs follow one line of rows)."""
        return self.spec is not None and self.constraint is None and self.logprobs is None


@dataclass
class _Round:
    """One round as it goes: the guess, how it was made, and how it is verified."""

    started: float
    draft: Draft = field(default_factory=Draft)
    plan: RoundPlan = RoundPlan(0)
    copied: bool = False          # the guess is a copy the engine made
    proposed: bool = False        # the drafter was asked for it
    verified: bool = False        # the target decoded for it (the first token's came with the prompt)
    rider: Rider | None = None
    shape: TreeRound | None = None  # None: a line
    drafted_at: float = 0.0
    verify_seconds: float = 0.0
    # What the policy judges: the drafter's line (a tree's first one) and how much of it
    # was kept; the guesses the target judged; a tree's kept path of nodes.
    judged: Draft = field(default_factory=Draft)
    judged_accepted: int = 0
    drafted: int = 0
    path: list[int] = field(default_factory=list)


class SpeculativeEngine:
    """Generates with a target model, speculating with ``drafter`` when it has one."""

    def __init__(self, target: ModelBackend, drafter: Drafter | None = None, note: str = "") -> None:
        self.target = target
        self.drafter = drafter
        self.note = note  # why there is no drafter, when there is none
        # Auto's measurements of this pair, kept from reply to reply.
        self._auto = AutoDraftLength()
        self._copier: LookupDrafter | None = None  # for SpecConfig.copy_min, made on first use
        # The target's one-token steps (plain replies, plain rounds), kept from reply to reply:
        # what each token would have cost without speculation (Stats.seconds_saved).
        self._plain_steps = RecentCost()
        self.threads = threads_for(target, drafter.model if drafter is not None else None)

    def generate(self, prompt: Sequence[int], sampling: SamplingConfig = SamplingConfig(),
                 spec: SpecConfig = SpecConfig(), max_tokens: int = 256,
                 cancel: threading.Event | None = None, policy: DraftPolicy | None = None,
                 copy_sources: CopySources | Sequence[Sequence[int]] | None = None,
                 constraint: Constraint | None = None, logprobs: int | None = None,
                 pause: Callable[[], None] | None = None) -> Generation:
        """Generate up to ``max_tokens`` after ``prompt``; ``policy`` decides each round's
        draft length (by default the one ``spec.draft_max`` names, see ``policy_for``).
        ``copy_sources`` (token sequences, or an index built ahead) are copied from like
        the context when ``spec.copy_min`` is set. ``constraint`` (a grammar, in its start
        state) limits what may be written, and advances as the reply goes; where it ends
        the reply is the grammar's, so ``ignore_eos`` does not apply under one.
        ``logprobs``: each event carries its token's log-probability and that many top
        alternatives (``target_rows.py``). ``pause``: called between the pieces of a long
        prompt's evaluation (``PAUSE_EVERY`` tokens), where other work may use the target
        if it puts the cache back as it found it (``app/server/interleave.py``)."""
        if not prompt:
            raise ContextOverflowError("The prompt is empty.")
        if len(prompt) >= self.target.n_ctx:
            raise ContextOverflowError(
                f"The prompt is {len(prompt)} tokens but the context holds {self.target.n_ctx}; "
                "shorten it or raise the context size.")
        speculate = spec.enabled and self.drafter is not None
        if constraint is not None:
            sampling = dataclasses.replace(sampling, ignore_eos=False)
        stats = Stats(prompt_tokens=len(prompt), speculative=speculate,
                      note="" if speculate else (self.note or SPECULATION_OFF),
                      memory_note=getattr(self.target, "memory_note", "") if speculate else "",
                      drafter=self.drafter.kind.value if speculate else "")
        detok = StreamingDetokenizer(self.target.token_bytes)
        if not spec.copy_min:
            copy_sources = None  # copying is off: from the context and from elsewhere alike
        elif copy_sources is not None and not isinstance(copy_sources, CopySources):
            index = CopySources(spec.copy_min)
            for source in copy_sources:
                index.add(source)
            copy_sources = index
        drafter = self.drafter if speculate else _NoDrafter()
        clock = time.process_time if self.threads.reads_target_cpu else None
        drafter.cpu_clock = time.process_time if self.threads.reads_draft_cpu else None
        reply = _Reply(drafter, sampling, spec if speculate else None,
                       self.policy_for(spec) if policy is None else policy, max_tokens,
                       cancel or threading.Event(), detok, stats, copy_sources, constraint, logprobs,
                       np.random.default_rng(sampling.seed),
                       np.array(sorted(self.target.eog_ids), dtype=np.int64) if sampling.ignore_eos else None,
                       clock)
        return Generation(_keeping_the_tail(self._run(list(prompt), reply, pause), detok), stats)

    def policy_for(self, spec: SpecConfig) -> DraftPolicy:
        """The policy ``spec.draft_max`` names: that fixed length, or this engine's auto
        policy, which keeps what it measured of the pair from one reply to the next."""
        return draft_policy(spec, self._auto)

    def _run(self, committed: list[int], reply: _Reply, pause: Callable[[], None] | None) -> Iterator[TokenEvent]:
        """The reply: the prompt, then rounds of draft, verify, accept, roll back, account."""
        target, drafter, stats = self.target, reply.drafter, reply.stats
        started = time.perf_counter()
        paused, first = self._prefill(committed, reply, pause)
        stats.prompt_seconds = time.perf_counter() - started - paused
        draft_seconds0 = drafter.seconds
        started = time.perf_counter()
        emitted = 0
        read_later = 0.0  # the drafter's reading of the prompt, after the first token
        try:
            while True:
                if reply.reads_later and emitted:
                    read_later = self._read_later(committed, reply)
                room = min(reply.max_tokens - emitted, target.n_ctx - len(committed))
                if room <= 0:
                    stats.stop_reason = StopReason.MAX_TOKENS if emitted >= reply.max_tokens else StopReason.CONTEXT_FULL
                    return
                if reply.cancel.is_set():
                    stats.stop_reason = StopReason.CANCELLED
                    return
                if first is not None:  # the prompt's own logits: the first token, the target's alone
                    now = time.perf_counter()
                    step, rows, first = _Round(started=now, drafted_at=now), first, None
                else:
                    step = self._draft(committed, room, reply)
                    rows = self._verify(committed, step, reply)
                draft, n_accepted, token, choice = self._accept(step, rows, reply)
                assert 0 <= n_accepted <= len(draft), "accepted more than was drafted"
                # Roll back: keep what was committed, minus the new last token.
                target.trim(len(committed) + n_accepted)
                committed.extend([*draft.tokens[:n_accepted], token])
                assert len(target.tokens) == len(committed) - 1
                drafter.roll_back(committed)
                self._account(step, draft, n_accepted, token, reply)
                for event in self._events(draft, n_accepted, token, reply.detok, choice):
                    if event.id in target.eog_ids and reply.masked is None:
                        stats.stop_reason = StopReason.EOS
                        return
                    emitted += 1
                    stats.tokens = emitted
                    stats.seconds = time.perf_counter() - started - read_later
                    yield event
        finally:
            stats.seconds = time.perf_counter() - started - read_later
            stats.plain_step_seconds = plain_step_estimate(self._plain_steps.value, reply.batch_steps)
            stats.draft_seconds = drafter.seconds - draft_seconds0
            drafter.report(stats)

    def _draft(self, committed: list[int], room: int, reply: _Reply) -> _Round:
        """1. Draft: a copy where the context (or a copy source) repeats, else the drafter's
        proposal where the plan drafts; cut where a grammar refuses it."""
        step = _Round(started=time.perf_counter())
        spec, drafter = reply.spec, reply.drafter
        model_seconds0 = drafter.seconds
        if spec is not None:
            self._guess(step, committed, room, reply)
        step.drafted_at = time.perf_counter()
        reply.stats.draft_host_seconds += step.drafted_at - step.started - (drafter.seconds - model_seconds0)
        return step

    def _guess(self, step: _Round, committed: list[int], room: int, reply: _Reply) -> None:
        spec, drafter, policy = reply.spec, reply.drafter, reply.policy
        if reply.trees:
            step.rider = drafter.rider(room, grows_trees(self.target), self._plain_steps.value)
        step.plan = plan = policy.plan_round(room - 1)
        # A copy costs no draft steps, so it is tried even where the policy would decode
        # plainly (its drafter does not pay there).
        copy_length = plan.length or min(COPY_WHEN_PLAIN, room - 1)
        if copy_length >= spec.draft_min:
            draft = self._copy(committed, copy_length, reply, drafter.copies_context, room - 1)
            step.copied = len(draft) > 0
            if (not step.copied and plan.length >= spec.draft_min and not reply.reads_later
                    and drafter.drafts_now(self._plain_steps.value, policy.adapts)):
                step.proposed = True
                # Under a constraint a drafter drafts with its own fork of it.
                extra = ({"constraint": reply.constraint} if reply.constraint else
                         branch_for(drafter.branches, self.target, plan.branch))
                if step.rider is not None:  # the rider takes branches; other lines may have the rest
                    extra = {"lines": grows_trees(self.target) - step.rider.width}
                draft = drafter.propose(committed, plan.length, reply.sampling, reply.rng,
                                        max(spec.p_min, plan.p_min), plan.go_on, **extra)
                policy.observe_draft(draft.step_seconds)
                self.threads.observe_draft(draft.step_seconds, draft.step_cpu_seconds)
            if reply.constraint is not None:
                draft = constrained_draft(draft, reply.constraint)  # what the grammar refuses can't be kept
            if len(draft) >= spec.draft_min:
                step.draft = draft
            else:
                step.copied = False

    def _verify(self, committed: list[int], step: _Round, reply: _Reply) -> np.ndarray:
        """2. Verify: one target batch, logits at the k+1 positions only (a tree: its nodes)."""
        target, draft = self.target, step.draft
        if step.rider is not None:
            step.shape = step.rider.shape(committed[-1], draft)
            if len(target.tokens) + len(step.shape.tree) > target.n_ctx:
                step.shape, step.rider = None, None  # no room for the rider at the end of the context
                draft.other_copies = []
        elif reply.trees:
            step.shape = grow_tree(committed[-1], draft, step.copied, step.plan.fork_copies, target)
        clock = reply.clock
        cpu, t = clock() if clock else 0.0, time.perf_counter()
        # Borrowed (no copy) where the target lends them: read within this round only.
        rows = (borrow_rows(target, [committed[-1], *draft.tokens], range(len(draft) + 1)) if step.shape is None
                else borrow_tree(target, step.shape.tree.tokens, step.shape.tree.parents))
        step.verify_seconds = elapsed = time.perf_counter() - t
        step.verified = True
        reply.stats.target_seconds += elapsed
        size = len(rows)  # a tree of n tokens costs as a line of n does
        reply.policy.observe_verify(size, elapsed)
        self.threads.observe_verify(size, elapsed, clock() - cpu if clock else None)
        if size == 1:
            self._plain_steps.add(elapsed)
        else:
            reply.batch_steps.setdefault(size, RecentCost()).add(elapsed)
        if reply.masked is not None:
            rows[:, reply.masked] = -np.inf
        return rows

    def _accept(self, step: _Round, rows: np.ndarray, reply: _Reply) -> tuple[Draft, int, int, TargetRows | _NoRows]:
        """3. Accept (under a constraint, which advances along what is emitted): the round
        as a line, how much of it the target kept, and the target's own next token."""
        if step.shape is None:
            choice = TargetRows(rows, step.draft.tokens, step.draft.q, reply.sampling, reply.constraint, reply.logprobs)
            n_accepted, token = choice.accept(reply.rng)
            step.judged, step.judged_accepted, step.drafted = step.draft, n_accepted, len(step.draft)
            return step.draft, n_accepted, token, choice
        # A tree: the kept path as a line; the backend keeps only it.
        shape = step.shape
        path, token = shape.accept(rows, reply.sampling, reply.rng)
        self.target.keep_branch(path)
        if step.rider is not None:
            step.rider.advance(rows, len(path))
        draft, n_accepted = shape.as_line(path)
        step.judged, step.judged_accepted, step.drafted = shape.main, shape.main_accepted(path), shape.guesses
        step.path = path
        reply.stats.tree_rounds += 1
        reply.stats.branch_tokens += n_accepted - step.judged_accepted
        return draft, n_accepted, token, _NO_ROWS

    def _account(self, step: _Round, draft: Draft, n_accepted: int, token: int, reply: _Reply) -> None:
        """5. Account: the reply's stats, and what the policy and the drafter learn of the round."""
        stats, policy = reply.stats, reply.policy
        stats.rounds += 1
        stats.drafted += step.drafted
        stats.accepted += n_accepted
        stats.rejections += n_accepted < len(draft)
        for i in range(len(draft)):
            stats.count_position(i, i < n_accepted)
        elapsed = step.verify_seconds
        if step.copied:
            # A copy says nothing about the drafter's guesses: keep it out of what the
            # policy learns of them.
            stats.copied += step.drafted
            stats.copied_accepted += n_accepted
        else:
            policy.observe_round(step.judged, step.judged_accepted, token, reply.sampling.greedy)
            if draft.tokens and step.shape is None:
                policy.observe_overhead(time.perf_counter() - step.started - elapsed
                                        - sum(draft.step_seconds) - draft.catchup_seconds)
        if step.proposed and reply.proposed_last:
            # What catching up on last round's guesses cost this one: a longer draft's price too.
            policy.observe_catchup(reply.proposed_last, draft.catchup_seconds)
        reply.proposed_last = len(draft) if step.proposed else 0
        seconds = time.perf_counter() - step.started
        if step.verified and not step.copied:
            policy.observe_outcome(step.proposed, n_accepted + 1, seconds)
        reply.drafter.observe(RoundOutcome(step.proposed, step.rider is not None, step.drafted, n_accepted,
                                           n_accepted + 1, seconds), stats)
        if step.shape is not None and step.shape.teaches_policy:
            policy.observe_tree(step.shape.tree, step.path, step.shape.kinds,
                                time.perf_counter() - step.started - elapsed
                                - sum(step.judged.step_seconds) - step.judged.catchup_seconds)
        stats.verify_host_seconds += time.perf_counter() - step.drafted_at - elapsed

    def _copy(self, committed: list[int], k: int, reply: _Reply, drafter_copies: bool, k_room: int) -> Draft:
        """What followed the latest earlier occurrence of the last ``copy_min`` tokens, in
        the context (unless the drafter copies from it by itself) or in the reply's copy
        sources: ``k`` tokens, or with an adapting policy up to ``k_room`` when the match
        reaches far back."""
        copy_min, own = reply.spec.copy_min, not drafter_copies
        if not copy_min or not (own or reply.sources is not None):
            return Draft()
        if self._copier is None or self._copier.ngram_min != copy_min:
            self._copier = LookupDrafter(self.target.n_vocab, copy_min, copy_min, self.target.eog_ids)
        return self._copier.copy(committed, k, reply.sampling, reply.sources, own=own,
                                 stretch_to=min(COPY_MOST, k_room) if reply.policy.adapts else 0)

    def _prefill(self, committed: list[int], reply: _Reply,
                 pause: Callable[[], None] | None = None) -> tuple[float, np.ndarray]:
        """Bring the target's cache to the whole prompt, reusing any common prefix; the
        seconds spent in ``pause`` (between pieces of a long prompt) come back, with the
        logits of the prompt's last token."""
        reuse = min(common_prefix(self.target.tokens, committed), len(committed) - 1)
        self.target.trim(reuse)
        body = committed[reuse:-1]
        paused = 0.0
        step = PAUSE_EVERY if pause is not None else max(len(body), 1)
        for start in range(0, len(body), step):
            self.target.evaluate(body[start:start + step], [])
            if pause is not None and start + step < len(body):
                t = time.perf_counter()
                pause()
                paused += time.perf_counter() - t
        # The prompt's last token on its own, with its logits (the reply's first token):
        # exactly a plain step, measured for Stats.seconds_saved (a drafting reply may run
        # none), at the price of reading the prompt in two calls. The auto policy needs it too: one token goes down a cheaper
        # path than a batch (matrix-vector), so the line through its batches' costs cannot
        # tell what a plain step costs (F16 Gemma on a CPU: 36 ms extrapolated, 25
        # measured), and it drafted at a loss until a plain round happened to measure one.
        t = time.perf_counter()
        rows = np.array(self.target.evaluate(committed[-1:], [0]))
        step_seconds = time.perf_counter() - t
        self._plain_steps.add(step_seconds)
        reply.policy.observe_verify(1, step_seconds)
        reply.stats.prompt_eval_tokens = len(committed) - reuse
        if reply.masked is not None:
            rows[:, reply.masked] = -np.inf
        return paused, rows

    def _read_later(self, committed: list[int], reply: _Reply) -> float:
        """The drafter reads the prompt (and the first round) now that the first token is
        out; its seconds count as the prompt's, not the decoding's."""
        started = time.perf_counter()
        reply.reads_later = False
        reply.drafter.prepare(committed)
        seconds = time.perf_counter() - started
        reply.stats.prompt_seconds += seconds
        return seconds

    def _events(self, draft: Draft, n_accepted: int, token: int,
                detok: StreamingDetokenizer, choice: TargetRows | _NoRows) -> Iterator[TokenEvent]:
        source = draft.source or None  # drafted through text: the draft's own tokens, shown on hover
        for i, d in enumerate(draft.tokens[:n_accepted]):
            yield TokenEvent(d, detok.push(d), TokenKind.ACCEPTED, logprobs=choice.logprobs(i, d),
                             draft_source=source)
        last = choice.logprobs(n_accepted, token)
        if not draft.tokens:
            yield TokenEvent(token, detok.push(token), TokenKind.PLAIN, logprobs=last)
        elif n_accepted == len(draft):
            yield TokenEvent(token, detok.push(token), TokenKind.BONUS, logprobs=last)
        else:
            rejected = draft.tokens[n_accepted]
            yield TokenEvent(token, detok.push(token), TokenKind.CORRECTED, draft_id=rejected,
                             draft_text=token_display_text(self.target.token_bytes(rejected)),
                             draft_prob=draft.probs[n_accepted], logprobs=last, draft_source=source)


class _NoRows:
    """A tree round's stand-in for ``TargetRows``: trees run without logprobs."""

    @staticmethod
    def logprobs(index: int, token: int) -> None:
        return None


_NO_ROWS = _NoRows()


def plain_step_estimate(plain: float | None, batches: dict[int, RecentCost]) -> float:
    """What one token would have cost the target alone: the measured plain steps' median,
    but no more than the cheapest batch size this reply verified (its median). One token
    costs less than any batch, so a plain step timed while something else held the CPU
    (the window drawing the user's message, another program) cannot inflate the time
    saved beyond that; the cheapest size is the tightest such bound (a batch of 2 costs
    about 1.25 plain steps on the demo target, one of 9 about 2)."""
    cheapest = min((cost.value for cost in batches.values()), default=None)  # each size has a step
    plain = plain or 0.0
    return min(plain, cheapest) if cheapest is not None else plain


def _keeping_the_tail(events: Iterator[TokenEvent], detok: StreamingDetokenizer) -> Iterator[TokenEvent]:
    """``events`` as they come, except that one after which the detokenizer holds part
    of a character waits for the next: if the reply ends first, that last event takes
    what was left (U+FFFD for a character cut short), so no byte of the reply is lost."""
    held: TokenEvent | None = None
    try:
        for event in events:
            if held is not None:
                yield held
            held = event if detok.pending else None
            if held is None:
                yield event
        if held is not None:
            yield dataclasses.replace(held, text=held.text + detok.flush())
    finally:
        events.close()  # a consumer that stops early still ends the run (its stats, its timers)
