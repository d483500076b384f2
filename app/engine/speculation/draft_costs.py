"""What a speculative round costs, measured as it goes (for ``draft_max="auto"``).

A round that drafts k tokens costs t_first + (k - 1) * t_draft + t_verify(k + 1)
+ overhead + k * t_catchup (the round's first draft step is dearer than the rest;
t_catchup: what the drafter spends, at the next round's start, per token this round
drafted, catching up on what the target kept: nothing for a draft model, whose cache
holds its own guesses, and for an MTP head the guesses read again from the target's
rows); plain decoding costs t_verify(1) per token.

Timings on a desktop are noisy: another program taking a core for a moment can
make one llama.cpp call ten times slower. So every cost is the median of its
recent measurements, not their mean.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Sequence

COST_WINDOW = 31       # measurements kept per cost; their median is the estimate
_BATCH_SLOPE = 0.15    # assumed extra cost per verified token before two batch sizes are measured


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


class RoundCosts:
    """Seconds per draft step, per verification by batch size, and per round beyond both."""

    def __init__(self) -> None:
        self._draft_step = RecentCost(2 * COST_WINDOW)  # seconds per draft step after the first
        # The first step of a round costs more: the target's weights have just been
        # through the CPU caches, and after a fully accepted round it is [d_k, bonus].
        self._first_step = RecentCost()
        self._overhead = RecentCost()                  # seconds a drafting round costs beyond its steps
        self._verify: dict[int, RecentCost] = {}       # batch size -> seconds
        # (tokens a round drafted, what catching up on it cost the next round beyond a
        # first step): a mean, since most rounds of a head cost some and some none.
        self._catchup: deque[tuple[int, float]] = deque(maxlen=2 * COST_WINDOW)

    @property
    def draft_step(self) -> float | None:
        return self._draft_step.value

    @property
    def first_step(self) -> float | None:
        return self._first_step.value if len(self._first_step) else self.draft_step

    @property
    def overhead(self) -> float:
        return self._overhead.value or 0.0

    @property
    def catchup(self) -> float:
        """Seconds of catching up per drafted token (0 until measured)."""
        drafted = sum(k for k, _ in self._catchup)
        return sum(s for _, s in self._catchup) / drafted if drafted else 0.0

    def verify_line(self) -> Callable[[int], float]:
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

    def by_length(self, longest: int) -> list[float] | None:
        """Expected seconds of a round drafting k = 0 .. ``longest`` tokens (0: a plain
        step); None until something is measured."""
        first_step = self.first_step
        if first_step is None or not self._verify:
            return None
        draft_step = self.draft_step or first_step  # one-token drafts so far: no later steps yet
        overhead, catchup = self.overhead, self.catchup
        verify_cost = self.verify_line()
        return [verify_cost(1), *(first_step + (k - 1) * draft_step + verify_cost(k + 1) + overhead + k * catchup
                                  for k in range(1, longest + 1))]

    # -- measuring ----------------------------------------------------------
    def observe_draft(self, step_seconds: Sequence[float]) -> None:
        """The seconds of each draft step of one round, in order."""
        if step_seconds:
            self._first_step.add(step_seconds[0])
            for seconds in step_seconds[1:]:
                self._draft_step.add(seconds)

    def observe_verify(self, batch: int, seconds: float) -> None:
        self._verify.setdefault(batch, RecentCost()).add(seconds)

    def observe_catchup(self, drafted: int, seconds: float) -> None:
        """The drafter caught up for ``seconds`` (its first step included) at the start of
        the round after one that drafted ``drafted`` tokens (0 seconds: it had nothing to
        catch up on)."""
        if drafted > 0:
            first = self.first_step or 0.0
            self._catchup.append((drafted, max(seconds - first, 0.0) if seconds else 0.0))

    def observe_overhead(self, seconds: float) -> None:
        """What a drafting round cost beyond its draft steps and its verification:
        rollback, bookkeeping, Python. Fixed per round, it makes longer drafts pay."""
        self._overhead.add(max(seconds, 0.0))


def _line(xs: list[int], ys: list[float], weights: list[int]) -> tuple[float, float]:
    """A line robust to one bad size (Theil-Sen, weighted): the slope is the weighted
    median of the slopes between each two sizes, the intercept the weighted median of
    what each size leaves. A least-squares line followed one stalled measurement at a
    size seen once (a batch of 13 at eight times its cost) so far that auto drafted
    one token for hundreds of rounds. Runs every round, over a dozen sizes at most:
    plain Python, no numpy call overhead."""
    pairs = [((ys[j] - ys[i]) / (xs[j] - xs[i]), weights[i] * weights[j])
             for i in range(len(xs)) for j in range(i + 1, len(xs))]
    slope = _weighted_median(pairs)
    return slope, _weighted_median([(y - slope * x, w) for x, y, w in zip(xs, ys, weights)])


def _weighted_median(values: list[tuple[float, float]]) -> float:
    """The value at which half the weight lies on either side (the lower at a tie)."""
    ordered = sorted(values)
    half, seen = sum(w for _, w in ordered) / 2, 0.0
    for value, weight in ordered:
        seen += weight
        if seen >= half:
            return value
    return ordered[-1][0]
