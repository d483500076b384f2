"""How often the target accepts drafts, learned as it goes (for ``draft_max="auto"``).

Two views of the same judgements:
- by position in the draft: a_i, the chance that draft i is accepted once drafts
  1..i-1 were, which prices drafting k tokens;
- by the draft's own confidence (the drafter's probability of its token, in
  bands), which says where one particular draft should end.

Acceptance needs no protection from timing noise: it is counted, not timed. The
counts decay, so the estimates follow the text as it changes.
"""

from __future__ import annotations

from bisect import bisect_right

CONFIDENCE_BANDS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)  # upper edges of draft-probability bands (last: 1)
PRIOR_ACCEPT = 0.9     # optimistic, so speculation is tried before it is judged
_DECAY = 0.98          # weight of history in the running acceptance counts
_POOLED_DECAY = 0.995  # ... and in the pooled count over every position
_SHRINK_RANGE = (4.0, 400.0)  # how many judgements the pooled rate may count for in a position's estimate
_SPREAD_MIN_JUDGED = 10.0     # positions judged fewer times say too little about how positions differ
_BAND_DECAY = 0.99     # memory of acceptance per confidence band (~100 judgements)
_BAND_PRIOR = 2.0      # judgements the prior counts for in a band


class PositionAcceptance:
    """a_i per draft position, as decayed counts (accepted, judged)."""

    def __init__(self, positions: int) -> None:
        self._accepted = [0.0] * positions
        self._judged_at = [0.0] * positions
        self._pooled = [PRIOR_ACCEPT, 1.0]  # over all positions, seeded with the prior
        self.rounds_judged = 0              # rounds whose drafts the target judged

    @property
    def rates(self) -> list[float]:
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

    def observe(self, drafted: int, accepted: int) -> None:
        """One round's draft of ``drafted`` tokens, of which the first ``accepted`` were kept."""
        if drafted:
            self.rounds_judged += 1
        # Positions past the first rejection were never judged: leave them be.
        judged = min(drafted, accepted + 1, len(self._accepted))
        for i in range(judged):
            hit = 1.0 if i < accepted else 0.0
            self._accepted[i] = _DECAY * self._accepted[i] + hit
            self._judged_at[i] = _DECAY * self._judged_at[i] + 1.0
            self._pooled[0] = _POOLED_DECAY * self._pooled[0] + hit
            self._pooled[1] = _POOLED_DECAY * self._pooled[1] + 1.0


class ConfidenceAcceptance:
    """Acceptance per confidence band, as decayed counts (accepted, judged)."""

    def __init__(self, prior: float = PRIOR_ACCEPT) -> None:
        self._prior = prior
        self._accepted = [0.0] * (len(CONFIDENCE_BANDS) + 1)
        self._judged = [0.0] * (len(CONFIDENCE_BANDS) + 1)

    @property
    def rates(self) -> list[float]:
        """Acceptance per confidence band (``CONFIDENCE_BANDS``, then up to 1)."""
        return [(accepted + _BAND_PRIOR * self._prior) / (judged + _BAND_PRIOR)
                for accepted, judged in zip(self._accepted, self._judged)]

    @property
    def judged(self) -> list[float]:
        """Judgements per band (decayed)."""
        return list(self._judged)

    def observe(self, prob: float, accepted: bool) -> None:
        """A judged draft token and the drafter's probability of it."""
        band = band_of(prob)
        self._accepted[band] = _BAND_DECAY * self._accepted[band] + float(accepted)
        self._judged[band] = _BAND_DECAY * self._judged[band] + 1.0


def band_of(prob: float) -> int:
    """Index of the confidence band ``prob`` falls in."""
    return bisect_right(CONFIDENCE_BANDS, prob)
