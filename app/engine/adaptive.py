"""How many tokens to draft next round (``draft_max="auto"``).

With per-position acceptance a_i (the chance that draft i is accepted once
drafts 1..i-1 were), a round that drafts k tokens emits
    E(k) = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k
tokens and costs t_first + (k - 1) * t_draft + t_verify(k + 1) + overhead (the
round's first draft step is dearer than the rest); plain decoding emits one
token per t_verify(1). The policy measures those costs as it goes and drafts the
k that maximises tokens per second (the shortest of those within 1% of it), or
nothing when no k beats plain decoding, then probes again now and then in case
the text became predictable.

Within a round the draft's own confidence decides where it ends (``draft_cut``):
how often drafts of each confidence are accepted is learned, and a draft stops
once the chance that all of it is accepted no longer pays for another draft
step. A run of sure tokens then drafts further than an average draft would be
worth; an unsure token ends the draft where a rejection is likely. Drafts below
the learned ``p_min`` are not proposed at all.

Timings on a desktop are noisy: another program taking a core for a moment can
make one llama.cpp call ten times slower. So every cost is the median of its
recent measurements, and speculation is switched off only after the model has
said "plain is faster" several rounds in a row; switching it back on is
immediate. Acceptance needs no such care: it is counted, not timed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import Callable, Sequence

from app.engine.types import SpecConfig

AUTO_MAX = 12          # longest draft auto will try
PROBE_EVERY = 16       # plain rounds between probes once speculation stopped paying
EXPLORE_EVERY = 8      # every so often draft one token more or less, to measure other batch sizes
CONFIDENCE_BANDS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)  # upper edges of draft-probability bands (last: 1)
WARMUP_ROUNDS = 8      # speculate at least this long before judging that it does not pay
OFF_AFTER = 4          # consecutive "plain is faster" verdicts before speculation stops
COST_WINDOW = 31       # measurements kept per cost; their median is the estimate
_DECAY = 0.98          # weight of history in the running acceptance counts
_POOLED_DECAY = 0.995  # ... and in the pooled count over every position
_SHRINK_RANGE = (4.0, 400.0)  # how many judgements the pooled rate may count for in a position's estimate
_SPREAD_MIN_JUDGED = 10.0     # positions judged fewer times say too little about how positions differ
_PRIOR_ACCEPT = 0.9    # optimistic, so speculation is tried before it is judged
_BAND_DECAY = 0.99     # memory of acceptance per confidence band (~100 judgements)
_BAND_PRIOR = 2.0      # judgements the prior counts for in a band
_BATCH_SLOPE = 0.15    # assumed extra cost per verified token before two sizes are measured
_FIRST_LENGTH = 4      # what to draft before anything is measured, and when probing
_PLATEAU = 0.01        # lengths within this fraction of the best expected speed count as equally good


class RecentCost:
    """The last few measurements of one cost; ``value`` is their median."""

    def __init__(self, size: int = COST_WINDOW) -> None:
        self._values: deque[float] = deque(maxlen=size)
        self._median: float | None = None  # cached: read every round, changed by one add

    def add(self, seconds: float) -> None:
        self._values.append(seconds)
        self._median = None

    def __len__(self) -> int:
        return len(self._values)

    @property
    def value(self) -> float | None:
        if self._median is None and self._values:
            ordered = sorted(self._values)
            middle = len(ordered) // 2
            self._median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        return self._median


class DraftLengthPolicy:
    def __init__(self) -> None:
        # Acceptance per draft position, as decayed counts (accepted, judged).
        self._accepted = [0.0] * AUTO_MAX
        self._judged_at = [0.0] * AUTO_MAX
        self._pooled = [_PRIOR_ACCEPT, 1.0]            # over all positions, seeded with the prior
        self._draft_step = RecentCost(2 * COST_WINDOW)  # seconds per draft step after the first
        # The first step of a round costs more: the target's weights have just been
        # through the CPU caches, and after a fully accepted round it is [d_k, bonus].
        self._first_step = RecentCost()
        self._overhead = RecentCost()                  # seconds a drafting round costs beyond its steps
        self._verify: dict[int, RecentCost] = {}       # batch size -> seconds
        self._since_probe = 0
        self._rounds = 0
        self._judged = 0                               # rounds whose drafts the target judged
        self._plain_votes = 0                          # consecutive rounds the model preferred plain
        self._off = False
        self._last_length = _FIRST_LENGTH              # the last k worth drafting, for probes
        # Acceptance per confidence band, as decayed counts (accepted, judged).
        self._band_accepted = [0.0] * (len(CONFIDENCE_BANDS) + 1)
        self._band_judged = [0.0] * (len(CONFIDENCE_BANDS) + 1)
        self._reach_floor: float | None = None         # see draft_cut; set each round by _plan

    # -- estimates ------------------------------------------------------------
    @property
    def draft_step(self) -> float | None:
        return self._draft_step.value

    @property
    def first_step(self) -> float | None:
        return self._first_step.value if len(self._first_step) else self.draft_step

    @property
    def round_overhead(self) -> float:
        return self._overhead.value or 0.0

    def verify_cost(self, batch: int) -> float:
        """Seconds to verify ``batch`` tokens, read off the fitted line (see ``_verify_line``)."""
        return self._verify_line()(batch)

    def _verify_line(self):
        """Verification cost by batch size: a line through the measured medians, each
        weighted by how many measurements it has. Batch sizes tried only while
        exploring have few; read one at a time, their medians jitter by more than
        a batch step costs, and that jitter decided between neighbouring k."""
        verify = {batch: cost.value for batch, cost in self._verify.items()}  # medians
        sizes = [s for s in verify if s >= 2]
        # One token goes down a cheaper matrix-vector path, so the line goes through
        # batches of two or more once there are two such sizes; a single token keeps
        # its own measurement.
        if len(sizes) < 2:
            sizes = list(verify)
        if len(sizes) == 1:
            # One size seen: assume a memory-bound model, where a batch costs little
            # more than a single token.
            base = verify[sizes[0]] / (1 + _BATCH_SLOPE * (sizes[0] - 1))
            slope, intercept = base * _BATCH_SLOPE, base * (1 - _BATCH_SLOPE)
        else:
            slope, intercept = _line(sizes, [verify[s] for s in sizes], [len(self._verify[s]) for s in sizes])
            slope = max(slope, 0.0)
        single = verify.get(1)
        return lambda batch: single if batch == 1 and single else max(intercept + slope * batch, 1e-6)

    # -- choosing ---------------------------------------------------------
    def draft_length(self, spec: SpecConfig, limit: int) -> int:
        if spec.draft_max != "auto":
            return max(0, min(int(spec.draft_max), limit))
        self._rounds += 1
        k, self._reach_floor = self._plan()
        if k:
            self._plain_votes, self._off = 0, False
            self._last_length = k
        elif self._judged >= WARMUP_ROUNDS:
            self._plain_votes += 1
            self._off = self._plain_votes >= OFF_AFTER
        if self._off:
            self._since_probe += 1
            if self._since_probe < PROBE_EVERY:
                return 0
            self._since_probe = 0
            k = self._last_length
        elif k == 0:
            k = self._last_length  # not convinced yet: keep drafting
        elif self._rounds % EXPLORE_EVERY == 0:
            k += 1 if (self._rounds // EXPLORE_EVERY) % 2 else -1
        return max(0, min(k, limit))

    def p_min(self, spec: SpecConfig) -> float:
        """The draft probability under which a draft ends. With auto it is learned: the
        top of the highest confidence band whose drafts the target rejects more often
        than it accepts. (A draft model that is a quantised copy of its target is right even
        about most of its unsure guesses, and cutting there would only cost rounds.)
        Bands start out trusted, and drafts cut at a band still teach it (greedy: the
        target's next token is the one that would have judged the cut draft)."""
        if spec.draft_max != "auto":
            return spec.p_min
        failing = [edge for edge, acceptance in zip(CONFIDENCE_BANDS, self.band_accept) if acceptance < 0.5]
        return max([spec.p_min, *failing])

    def draft_cut(self, spec: SpecConfig) -> Callable[[float], bool] | None:
        """With auto, what the drafter asks after each token it drafts: go on?

        It multiplies the acceptance of each drafted token's confidence band into the
        chance that the whole draft so far is accepted, and says stop once that falls
        under the floor set by ``_plan``: below it, the next token's expected yield no
        longer pays for its draft step and its place in the verification. Where a
        draft ends depends only on the draft's own probabilities, so it stays lossless."""
        if spec.draft_max != "auto" or self._reach_floor is None:
            return None
        accept, floor = self.band_accept, self._reach_floor
        reach = 1.0

        def go_on(prob: float) -> bool:
            nonlocal reach
            reach *= accept[_band(prob)]
            return reach >= floor

        return go_on

    @property
    def band_accept(self) -> list[float]:
        """Acceptance per confidence band (``CONFIDENCE_BANDS``, then up to 1)."""
        return [(accepted + _BAND_PRIOR * _PRIOR_ACCEPT) / (judged + _BAND_PRIOR)
                for accepted, judged in zip(self._band_accepted, self._band_judged)]

    def best_length(self) -> int:
        """The most tokens worth drafting next round; 0 when plain decoding is faster."""
        return self._plan()[0]

    def _plan(self) -> tuple[int, float | None]:
        """The most tokens to draft, and the floor of ``draft_cut`` (None: no cut yet).

        The length model first: per-position acceptance gives the expected speed of
        drafting k. Near its peak that speed is flat over several k (tokens per round
        are concave in k, a round's cost linear), so the single best k is decided by
        estimation noise; of the lengths within ``_PLATEAU`` of the best, the shortest
        is taken (deep positions are the least certain part of the estimate).

        That k is what an average draft is worth. A draft whose every token is sure is
        worth more, so it may go on as far as a run of the top confidence band's
        acceptance pays (the ceiling), because ``draft_cut`` ends it early once a token
        is worth less than it costs: a token accepted with chance R yields R tokens
        and costs one more draft step and verified token (s seconds), which pays while
        R / s is at least the best expected speed. The floor on R is best speed x s."""
        costs = self.round_costs()
        if costs is None:
            return _FIRST_LENGTH, None  # nothing measured yet
        rates = _expected_rates(self.accept, costs)
        if self._judged < WARMUP_ROUNDS:
            rates[0] = 0.0  # too few rounds to conclude that plain decoding is faster
        best = max(rates)
        if rates[0] == best:
            return 0, None
        length = next(k for k in range(1, len(rates)) if rates[k] >= best * (1 - _PLATEAU))
        sure = _expected_rates([self.band_accept[-1]] * AUTO_MAX, costs)
        ceiling = sure.index(max(sure[1:]))
        one_more_token = costs[2] - costs[1]  # a draft step and one more verified token
        return max(length, ceiling), best * one_more_token

    def round_costs(self) -> list[float] | None:
        """Expected seconds of a round drafting k = 0 .. AUTO_MAX tokens (0: a plain
        step); None until something is measured."""
        first_step = self.first_step
        if first_step is None or not self._verify:
            return None
        draft_step = self.draft_step or first_step  # one-token drafts so far: no later steps yet
        overhead = self.round_overhead
        verify_cost = self._verify_line()
        return [verify_cost(1), *(first_step + (k - 1) * draft_step + verify_cost(k + 1) + overhead
                                  for k in range(1, AUTO_MAX + 1))]

    @property
    def accept(self) -> list[float]:
        """a_i per draft position: its own record, shrunk towards the pooled rate.

        Deep positions are judged only when every draft before them was accepted, so
        their own records are thin; alone, a prior would keep drafts short forever
        (too pessimistic to ever draft deep enough to learn otherwise). How far to
        shrink is read from the data (empirical Bayes): when the well-judged positions
        differ from each other no more than chance would make them, one position's
        unlucky rejections are chance too, and the pooled rate stands for all of
        them; when they truly differ, each keeps more of its own record. On the
        pairs measured, acceptance deep in a draft is if anything higher (a draft
        that got that far is on track), so the pooled rate is the cautious guess."""
        pooled = self._pooled[0] / self._pooled[1]
        shrink = self._shrinkage(pooled)
        return [(accepted + shrink * pooled) / (judged + shrink)
                for accepted, judged in zip(self._accepted, self._judged_at)]

    def _shrinkage(self, pooled: float) -> float:
        """Judgements the pooled rate counts for: chance variance / variance between positions."""
        seen = [(accepted / judged, judged) for accepted, judged in zip(self._accepted, self._judged_at)
                if judged >= _SPREAD_MIN_JUDGED]
        low, high = _SHRINK_RANGE
        if len(seen) < 2:
            return high  # nothing yet says positions differ
        chance = max(pooled * (1 - pooled), 1e-4)
        spread = (sum((rate - pooled) ** 2 for rate, _ in seen) - sum(chance / judged for _, judged in seen)) / len(seen)
        return high if spread <= chance / high else max(low, chance / spread)

    # -- learning -----------------------------------------------------------
    def observe_draft(self, step_seconds: Sequence[float]) -> None:
        """The seconds of each draft step of one round, in order."""
        if step_seconds:
            self._first_step.add(step_seconds[0])
            for seconds in step_seconds[1:]:
                self._draft_step.add(seconds)

    def observe_overhead(self, seconds: float) -> None:
        """What a drafting round cost beyond its draft steps and its verification:
        rollback, bookkeeping, Python. Fixed per round, it makes longer drafts pay."""
        self._overhead.add(max(seconds, 0.0))

    def observe_verify(self, batch: int, seconds: float) -> None:
        self._verify.setdefault(batch, RecentCost()).add(seconds)

    def observe_confidence(self, prob: float, accepted: bool) -> None:
        """A judged draft token and the drafter's probability of it."""
        band = _band(prob)
        self._band_accepted[band] = _BAND_DECAY * self._band_accepted[band] + float(accepted)
        self._band_judged[band] = _BAND_DECAY * self._band_judged[band] + 1.0

    def observe_round(self, drafted: int, accepted: int) -> None:
        if drafted:
            self._judged += 1
        # Positions past the first rejection were never judged: leave them be.
        judged = min(drafted, accepted + 1, AUTO_MAX)
        for i in range(judged):
            hit = 1.0 if i < accepted else 0.0
            self._accepted[i] = _DECAY * self._accepted[i] + hit
            self._judged_at[i] = _DECAY * self._judged_at[i] + 1.0
            self._pooled[0] = _POOLED_DECAY * self._pooled[0] + hit
            self._pooled[1] = _POOLED_DECAY * self._pooled[1] + 1.0


def _expected_rates(accept: Sequence[float], costs: Sequence[float]) -> list[float]:
    """Expected tokens per second drafting k = 0 .. len(accept) tokens (0: a plain step),
    for per-position acceptance ``accept`` and ``costs`` from ``round_costs``."""
    rates = [1.0 / costs[0]]
    expected, reach = 1.0, 1.0
    for k, accept_k in enumerate(accept, start=1):
        reach *= accept_k
        expected += reach
        rates.append(expected / costs[k])
    return rates


def _band(prob: float) -> int:
    """Index of the confidence band ``prob`` falls in."""
    return bisect_right(CONFIDENCE_BANDS, prob)


def _line(xs: list[int], ys: list[float], weights: list[int]) -> tuple[float, float]:
    """Weighted least-squares slope and intercept (runs every round: no numpy call overhead)."""
    total = sum(weights)
    mean_x = sum(w * x for w, x in zip(weights, xs)) / total
    mean_y = sum(w * y for w, y in zip(weights, ys)) / total
    sxx = sum(w * (x - mean_x) ** 2 for w, x in zip(weights, xs))
    slope = sum(w * (x - mean_x) * (y - mean_y) for w, x, y in zip(weights, xs, ys)) / sxx
    return slope, mean_y - slope * mean_x
