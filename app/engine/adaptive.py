"""How many tokens to draft next round (``draft_max="auto"``).

With per-position acceptance a_i (the chance that draft i is accepted once
drafts 1..i-1 were), a round that drafts k tokens emits
    E(k) = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k
tokens and costs k * t_draft + t_verify(k + 1); plain decoding emits one token
per t_verify(1). The policy measures those costs as it goes and drafts the k
that maximises tokens per second (a drafting round also pays a fixed overhead),
or nothing when no k beats plain decoding,
then probes again now and then in case the text became predictable.
"""

from __future__ import annotations

import numpy as np

from app.engine.types import SpecConfig

AUTO_MAX = 12          # longest draft auto will try
PROBE_EVERY = 16       # plain rounds between probes once speculation stopped paying
EXPLORE_EVERY = 8      # every so often draft one token more or less, to measure other batch sizes
AUTO_P_MIN = 0.1       # with auto, a draft token this unlikely is not worth verifying
_DECAY = 0.95          # weight of history in the running estimates
WARMUP_ROUNDS = 8      # speculate at least this long before judging that it does not pay
_PRIOR_ACCEPT = 0.9    # optimistic, so speculation is tried before it is judged
_BATCH_SLOPE = 0.15    # assumed extra cost per verified token before two sizes are measured


class DraftLengthPolicy:
    def __init__(self) -> None:
        self.accept = [_PRIOR_ACCEPT] * AUTO_MAX   # a_i per position
        self.draft_step: float | None = None       # seconds per drafted token
        self.round_overhead = 0.0                  # seconds a drafting round costs beyond its steps
        self.verify: dict[int, float] = {}         # batch size -> seconds
        self._samples: dict[object, int] = {}      # how many measurements each estimate has
        self._since_probe = 0
        self._rounds = 0
        self._judged = 0                           # rounds whose drafts the target judged
        self._depth = 0                            # deepest draft position ever judged

    # -- choosing ---------------------------------------------------------
    def draft_length(self, spec: SpecConfig, limit: int) -> int:
        if spec.draft_max != "auto":
            return max(0, min(int(spec.draft_max), limit))
        self._rounds += 1
        k = self.best_length()
        if k == 0:
            self._since_probe += 1
            if self._since_probe >= PROBE_EVERY:
                self._since_probe = 0
                k = 2
        elif self._rounds % EXPLORE_EVERY == 0:
            k += 1 if (self._rounds // EXPLORE_EVERY) % 2 else -1
        return max(0, min(k, limit))

    def p_min(self, spec: SpecConfig) -> float:
        return max(spec.p_min, AUTO_P_MIN) if spec.draft_max == "auto" else spec.p_min

    def best_length(self) -> int:
        """The k with the highest expected tokens per second; 0 when plain is faster."""
        if self.draft_step is None or not self.verify:
            return 4  # nothing measured yet
        best_k, best_rate = 0, 1.0 / self.verify_cost(1)
        if self._judged < WARMUP_ROUNDS:
            best_rate = 0.0  # too few rounds to conclude that plain decoding is faster
        expected, reach = 1.0, 1.0
        for k in range(1, AUTO_MAX + 1):
            reach *= self._acceptance_at(k - 1)
            expected += reach
            rate = expected / (k * self.draft_step + self.verify_cost(k + 1) + self.round_overhead)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    def _acceptance_at(self, position: int) -> float:
        """Positions never judged borrow the deepest judged one's estimate: acceptance
        deep in a draft is, if anything, higher (a draft that got that far is on track)."""
        if self._depth and position >= self._depth:
            return self.accept[self._depth - 1]
        return self.accept[position]

    def verify_cost(self, batch: int) -> float:
        """Seconds to verify ``batch`` tokens: measured, or from a line through what was."""
        if batch in self.verify:
            return self.verify[batch]
        sizes = np.array(sorted(self.verify), dtype=float)
        times = np.array([self.verify[int(s)] for s in sizes])
        if len(sizes) == 1:
            # One size seen: assume a memory-bound model, where a batch costs little
            # more than a single token.
            base = times[0] / (1 + _BATCH_SLOPE * (sizes[0] - 1))
            return base * (1 + _BATCH_SLOPE * (batch - 1))
        slope, intercept = np.polyfit(sizes, times, 1)
        return max(intercept + max(slope, 0.0) * batch, 1e-6)

    # -- learning -----------------------------------------------------------
    def observe_draft(self, n_tokens: int, seconds: float) -> None:
        if n_tokens:
            self.draft_step = self._update("draft", self.draft_step, seconds / n_tokens)

    def observe_overhead(self, seconds: float) -> None:
        """What a drafting round cost beyond its draft steps and its verification: the
        draft catching up after a fully accepted round, rollback, Python. Fixed per
        round, it is what makes longer drafts pay."""
        self.round_overhead = self._update("overhead", self.round_overhead if "overhead" in self._samples
                                           else None, max(seconds, 0.0))

    def observe_verify(self, batch: int, seconds: float) -> None:
        self.verify[batch] = self._update(batch, self.verify.get(batch), seconds)

    def observe_round(self, drafted: int, accepted: int) -> None:
        if drafted:
            self._judged += 1
        # Positions past the first rejection were never judged: leave them be.
        judged = min(drafted, accepted + 1, AUTO_MAX)
        self._depth = max(self._depth, judged)
        for i in range(judged):
            self.accept[i] = _mix(self.accept[i], 1.0 if i < accepted else 0.0)

    def _update(self, key: object, old: float | None, new: float) -> float:
        """A running mean at first, then a moving average; one stall (another process
        taking the CPU) moves the estimate by at most 3x, so it cannot switch
        speculation off for long on its own."""
        n = self._samples[key] = self._samples.get(key, 0) + 1
        if old is None:
            return new
        if old > 0:
            new = min(max(new, old / 3), old * 3)
        weight = max(1.0 / n, 1 - _DECAY)
        return (1 - weight) * old + weight * new


def _mix(old: float, new: float) -> float:
    return _DECAY * old + (1 - _DECAY) * new
