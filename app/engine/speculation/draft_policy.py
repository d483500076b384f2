"""How many tokens each round drafts: a fixed length, or ``auto``.

The policy is chosen once, from ``SpecConfig.draft_max`` (``draft_policy``), and
handed to ``SpeculativeEngine.generate``. Each round the loop asks it for a plan
(``plan_round``: this advances auto's state, so ask once per round) and then
tells it what the round cost and which drafts the target kept (``observe_*``).

Auto: with per-position acceptance a_i (``acceptance.py``), a round that drafts
k tokens emits E(k) = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k tokens, at the cost
``draft_costs.py`` measures. Auto drafts the k that maximises tokens per second
(the shortest of those within 1% of it), or nothing when no k beats plain
decoding, then probes again now and then in case the text became predictable.

Within a round the draft's own confidence decides where it ends (``RoundPlan.go_on``):
a draft stops once the chance that all of it is accepted no longer pays for
another draft step. A run of sure tokens then drafts further than an average
draft would be worth; an unsure token ends the draft where a rejection is likely.
Drafts below the learned ``p_min`` are not proposed at all.

Token trees (``tree_policy.py``): with ``SpecConfig.tree`` "auto" the same closures
decide, token by token, where a second candidate beside a draft token pays for its
place in the batch, and whether a second copy does; "on" branches wherever the draft
is unsure, "off" never. A fixed length never branches unless told to.

Costs are noisy, so speculation is switched off only after the model has said
"plain is faster" several rounds in a row; switching it back on is immediate. Where
plain is clearly faster (``CLEAR_LEAD``: by a tenth or more), that verdict may come
after half the warm-up, so a draft that does not pay stops four rounds sooner; where
speculation pays, nothing changes. Neither the votes nor the probes were cut further:
on the recorded trace (tests/engine/speculation/policy_trace.json) two votes instead of four kept a
recovered draft off for 12 more of 420 rounds, and spacing probes out kept it off
for good, because probes' draft steps are what refresh the draft's cost estimate (a
median of the last 62). (Every decision here only sets how much is drafted: the output
stays the target's.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Protocol, Sequence

from app.engine.speculation.acceptance import CONFIDENCE_BANDS, ConfidenceAcceptance, PositionAcceptance, band_of
from app.engine.speculation.draft_costs import RoundCosts
from app.engine.speculation.draft import Draft
from app.engine.speculation.measured_pay import MeasuredPay
from app.engine.speculation.token_tree import TokenTree
from app.engine.speculation.tree_policy import BRANCH_BELOW, BranchPolicy
from app.engine.types import SpecConfig

AUTO_MAX = 12          # longest draft auto will try
PROBE_EVERY = 16       # plain rounds between probes once speculation stopped paying
EXPLORE_EVERY = 8      # every so often draft one token more or less (never none), to measure other batch sizes
WARMUP_ROUNDS = 8      # speculate at least this long before judging that it does not pay
OFF_AFTER = 4          # consecutive "plain is faster" verdicts before speculation stops
CLEAR_LEAD = 1.10      # plain's expected speed over the best draft's that is a clear verdict ...
CLEAR_WARMUP_ROUNDS = WARMUP_ROUNDS // 2  # ... may be reached after this many judged rounds
_FIRST_LENGTH = 4      # what to draft before anything is measured, and when probing
_PLATEAU = 0.01        # lengths within this fraction of the best expected speed count as equally good
TREE_SECONDS = 3       # most second candidates a round's tree has (branches: one more)
MOST_CUT = 0.5         # a band accepted less often than this never pays (p_min)
SURE_SEEN = 8.0        # judgements of the most confident band before sure runs may draft further


@dataclass(frozen=True)
class RoundPlan:
    """What one round drafts: at most ``length`` tokens (0: a plain step), none under
    ``p_min``, and, after each drafted token, ``go_on(its probability)`` false ends
    the draft (None: no cut). Both look only at the draft's own probabilities, so
    where a draft ends never biases what the target accepts."""

    length: int
    p_min: float = 0.0
    go_on: Callable[[float], bool] | None = None
    # Token trees: ``branch(a draft token's probability)`` true keeps a second
    # candidate beside it; ``fork_copies``: a copy may bring a second, differing copy.
    branch: Callable[[float], bool] | None = None
    fork_copies: bool = False


class DraftPolicy(Protocol):
    adapts: bool  # auto: it learns the length; False: the user fixed one

    def plan_round(self, limit: int) -> RoundPlan:
        """The next round's plan, at most ``limit`` tokens long. May advance the
        policy's state: call it once per round."""

    def observe_draft(self, step_seconds: Sequence[float]) -> None:
        """The seconds of each step of a draft the draft model made."""

    def observe_verify(self, batch: int, seconds: float) -> None:
        """The seconds the target took to verify ``batch`` tokens (plain steps too)."""

    def observe_round(self, draft: Draft, n_accepted: int, token: int, greedy: bool) -> None:
        """A model draft the target judged: it kept ``n_accepted`` and wrote ``token`` next."""

    def observe_overhead(self, seconds: float) -> None:
        """What a drafting round cost beyond its draft steps and its verification."""

    def observe_catchup(self, drafted: int, seconds: float) -> None:
        """What the drafter's catching up cost at the start of this round (its first step
        included; 0: none), after a round in which it drafted ``drafted`` tokens."""

    def observe_tree(self, tree: TokenTree, path: list[int], kinds: dict[int, str], overhead: float) -> None:
        """A tree round (after ``observe_round`` of its first chain): the path the target
        kept, the nodes that start a branch ("second" or "fork"), and what the round cost
        beyond its draft steps and its batch. Called only where a plan asked for branches."""

    def observe_outcome(self, drafted: bool, written: int, seconds: float) -> None:
        """Every round, last: whether the drafter's guess was verified (else a plain round;
        a copy's round is not told), the tokens it wrote, and its seconds, all in."""


class FixedDraftLength:
    """Always ``length`` tokens (or what room is left); measures nothing. With
    ``trees`` ("on"), branches wherever the draft is unsure and forks every copy."""

    adapts = False

    def __init__(self, length: int, trees: str = "off") -> None:
        self.length = length
        self.trees = trees

    def plan_round(self, limit: int) -> RoundPlan:
        if self.trees == "on":
            return RoundPlan(max(0, min(self.length, limit)), branch=lambda prob: prob < BRANCH_BELOW,
                             fork_copies=True)
        return RoundPlan(max(0, min(self.length, limit)))

    def observe_draft(self, step_seconds: Sequence[float]) -> None:
        pass

    def observe_verify(self, batch: int, seconds: float) -> None:
        pass

    def observe_round(self, draft: Draft, n_accepted: int, token: int, greedy: bool) -> None:
        pass

    def observe_overhead(self, seconds: float) -> None:
        pass

    def observe_catchup(self, drafted: int, seconds: float) -> None:
        pass

    def observe_tree(self, tree: TokenTree, path: list[int], kinds: dict[int, str], overhead: float) -> None:
        pass

    def observe_outcome(self, drafted: bool, written: int, seconds: float) -> None:
        pass


class BestDraft(NamedTuple):
    length: int                 # the most tokens worth drafting; 0 when plain decoding is faster
    reach_floor: float | None   # see AutoDraftLength._go_on; None: no cut yet
    plain_lead: float = 0.0     # plain's expected speed / the best draft's (> 1: plain is faster)
    speed: float = 0.0          # the best expected tokens per second (0: nothing measured)
    slope: float = 0.0          # seconds one more verified token costs


class AutoDraftLength:
    """Measures costs and acceptance as it runs, and drafts what they say pays."""

    adapts = True

    def __init__(self, trees: str = "auto") -> None:
        self.trees = trees                             # SpecConfig.tree: "auto", "on" or "off"
        self.branches = BranchPolicy()
        self.costs = RoundCosts()
        self.positions = PositionAcceptance(AUTO_MAX)
        self.confidence = ConfidenceAcceptance()
        # The on/off/probe state machine.
        self._rounds = 0
        self._since_probe = 0
        self._plain_votes = 0                          # consecutive rounds the model preferred plain
        self._off = False
        self._last_length = _FIRST_LENGTH              # the last k worth drafting, for probes
        self.measured = MeasuredPay()                  # the same question, by whole rounds' times

    def plan_round(self, limit: int) -> RoundPlan:
        """This round's plan; counts the round, votes on plain vs speculative and probes."""
        self._rounds += 1
        best = self.best_draft()
        k = best.length
        if k:
            self._plain_votes, self._off = 0, False
            self._last_length = k
        elif self.positions.rounds_judged >= CLEAR_WARMUP_ROUNDS:  # a verdict best_draft allows
            self._plain_votes += 1
            self._off = self._plain_votes >= OFF_AFTER
        if self._off:
            self._since_probe += 1
            if self._since_probe < PROBE_EVERY:
                return self._plan(0, best)
            self._since_probe = 0
            k = self._last_length
        elif k == 0:
            k = self._last_length  # not convinced yet: keep drafting
        elif self._rounds % EXPLORE_EVERY == 0:
            # One token more or less, but never down to a plain round: every reply's first
            # token is a timed plain step already, and where one drafted token is best (an
            # MTP head on a quantised file) a plain round gave up a fifth of its tokens.
            up = (self._rounds // EXPLORE_EVERY) % 2
            k += 1 if up else -1 if k > 1 else 0
        if k and self.measured.holds_off():
            k = 0  # the model says drafting pays; the rounds it drafted say it does not
        return self._plan(max(0, min(k, limit)), best)

    def _plan(self, length: int, best: BestDraft) -> RoundPlan:
        if self.trees == "off" or (self.trees == "auto" and not best.speed):
            return RoundPlan(length, self.p_min, None if best.reach_floor is None else self._go_on(best.reach_floor))
        if self.trees == "on":
            go_on = None if best.reach_floor is None else self._go_on(best.reach_floor)
            return RoundPlan(length, self.p_min, go_on, lambda prob: prob < BRANCH_BELOW, fork_copies=True)
        extra = max(0.0, (self.branches.tree_overhead.value or 0.0) - self.costs.overhead)
        go_on = None if best.reach_floor is None else self._go_on(best.reach_floor)
        return RoundPlan(length, self.p_min, go_on,
                         self.branches.brancher(self.confidence.rates, best.speed, best.slope, extra, TREE_SECONDS),
                         self.branches.fork_pays(best.speed, best.slope))

    @property
    def p_min(self) -> float:
        """The draft probability under which a draft ends, learned: the top of the
        highest confidence band whose drafts are accepted too seldom to pay (0: none).
        A round that drafts one token instead of none pays where that token is
        accepted with chance R > (its round's cost / a plain step's) - 1: about 0.1 for
        a small draft model, whose steps cost little; 0.45 for an MTP head, whose step
        costs a third of the target's. Never above one half (rejected more often than
        accepted); one half until the costs are measured. (A draft model that is a
        quantised copy of its target is right even about most of its unsure guesses,
        and cutting there would only cost rounds.) Bands start out trusted, and drafts
        cut at a band still teach it (greedy: the target's next token is the one that
        would have judged the cut draft)."""
        costs = self.costs.by_length(1)
        pays = min(MOST_CUT, costs[1] / costs[0] - 1.0) if costs else MOST_CUT
        failing = [edge for edge, acceptance in zip(CONFIDENCE_BANDS, self.confidence.rates) if acceptance < pays]
        return max(failing, default=0.0)

    def _go_on(self, floor: float) -> Callable[[float], bool]:
        """What the drafter asks after each token it drafts: go on?

        It multiplies the acceptance of each drafted token's confidence band into the
        chance that the whole draft so far is accepted, and says stop once that falls
        under ``floor`` (from ``best_draft``): below it, the next token's expected
        yield no longer pays for its draft step and its place in the verification."""
        accept = self.confidence.rates
        reach = 1.0

        def go_on(prob: float) -> bool:
            nonlocal reach
            reach *= accept[band_of(prob)]
            return reach >= floor

        return go_on

    def best_draft(self) -> BestDraft:
        """What the estimates favour now (reads them, changes nothing).

        The length model first: per-position acceptance gives the expected speed of
        drafting k. Near its peak that speed is flat over several k (tokens per round
        are concave in k, a round's cost linear), so the single best k is decided by
        estimation noise; of the lengths within ``_PLATEAU`` of the best, the shortest
        is taken (deep positions are the least certain part of the estimate).

        That k is what an average draft is worth. A draft whose every token is sure is
        worth more, so it may go on as far as a run of the top confidence band's
        acceptance pays (the ceiling), because ``go_on`` ends it early once a token
        is worth less than it costs: a token accepted with chance R yields R tokens
        and costs one more draft step and verified token (s seconds), which pays while
        R / s is at least the best expected speed. The floor on R is best speed x s."""
        costs = self.costs.by_length(AUTO_MAX)
        if costs is None:
            return BestDraft(_FIRST_LENGTH, None)  # nothing measured yet
        rates = _expected_rates(self.positions.rates, costs)
        lead = rates[0] / max(rates[1:])
        judged = self.positions.rounds_judged
        if judged < WARMUP_ROUNDS and not (judged >= CLEAR_WARMUP_ROUNDS and lead >= CLEAR_LEAD):
            rates[0] = 0.0  # too few rounds to conclude that plain decoding is faster
        best = max(rates)
        # One more verified token: what costs[2] - costs[1] is, less its draft step.
        slope = max(costs[2] - costs[1] - (self.costs.draft_step or self.costs.first_step or 0.0), 1e-6)
        if rates[0] == best:
            return BestDraft(0, None, lead, best, slope)
        length = next(k for k in range(1, len(rates)) if rates[k] >= best * (1 - _PLATEAU))
        ceiling = length
        if self.confidence.judged[-1] >= SURE_SEEN:
            # Only a drafter seen to be sure earns the runs: an MTP head that never is
            # would draft 4 tokens on the band's prior where 2 was faster.
            sure = _expected_rates([self.confidence.rates[-1]] * AUTO_MAX, costs)
            ceiling = sure.index(max(sure[1:]))
        one_more_token = costs[2] - costs[1]  # a draft step and one more verified token
        return BestDraft(max(length, ceiling), best * one_more_token, lead, best, slope)

    # -- learning -----------------------------------------------------------
    def observe_draft(self, step_seconds: Sequence[float]) -> None:
        self.costs.observe_draft(step_seconds)

    def observe_verify(self, batch: int, seconds: float) -> None:
        self.costs.observe_verify(batch, seconds)

    def observe_overhead(self, seconds: float) -> None:
        self.costs.observe_overhead(seconds)

    def observe_catchup(self, drafted: int, seconds: float) -> None:
        self.costs.observe_catchup(drafted, seconds)

    def observe_round(self, draft: Draft, n_accepted: int, token: int, greedy: bool) -> None:
        self.positions.observe(len(draft), n_accepted)
        if greedy and self.trees == "auto" and n_accepted not in draft.alternatives:
            self.branches.observe_chain(draft, n_accepted, token)  # a tree round judges its own
        # How often drafts of each confidence are accepted: every judged token ...
        for i, prob in enumerate(draft.probs[:n_accepted + 1]):
            self.confidence.observe(prob, i < n_accepted)
        if draft.dropped and n_accepted == len(draft) and greedy:
            # ... and the one p_min cut off, which the target's next token judges
            # exactly as it would have judged the draft.
            dropped, prob = draft.dropped
            self.confidence.observe(prob, token == dropped)


    def observe_tree(self, tree: TokenTree, path: list[int], kinds: dict[int, str], overhead: float) -> None:
        self.branches.observe_tree(tree, path, kinds)
        self.branches.tree_overhead.add(max(overhead, 0.0))

    def observe_outcome(self, drafted: bool, written: int, seconds: float) -> None:
        costs = self.costs.by_length(0)
        self.measured.observe(drafted, written, seconds, costs[0] if costs else None)


def draft_policy(spec: SpecConfig, auto: AutoDraftLength | None = None) -> DraftPolicy:
    """The policy ``spec.draft_max`` names, the one place that tells auto from a fixed
    length: that length, or auto: ``auto`` where given (an engine keeps what it measured
    of its pair from reply to reply), else a fresh one. ``spec.tree`` says whether either
    branches."""
    if spec.auto:
        if auto is None:
            return AutoDraftLength(spec.tree)
        auto.trees = spec.tree
        return auto
    return FixedDraftLength(int(spec.draft_max), "on" if spec.tree == "on" else "off")


def _expected_rates(accept: Sequence[float], costs: Sequence[float]) -> list[float]:
    """Expected tokens per second drafting k = 0 .. len(accept) tokens (0: a plain step),
    for per-position acceptance ``accept`` and ``costs`` from ``RoundCosts.by_length``."""
    rates = [1.0 / costs[0]]
    expected, reach = 1.0, 1.0
    for k, accept_k in enumerate(accept, start=1):
        reach *= accept_k
        expected += reach
        rates.append(expected / costs[k])
    return rates
