"""What the lookahead and text-bridge policies share: a rate over kept rounds, and an off
switch that tries again now and then, each probe twice as late as the last (up to a
ceiling) until one pays and the spacing starts over."""

from __future__ import annotations

from collections import deque


def rate(rounds: deque[tuple[int, float]]) -> float:
    """Tokens per second over (tokens, seconds) rounds (0 for none)."""
    seconds = sum(s for _, s in rounds)
    return sum(t for t, _ in rounds) / seconds if seconds else 0.0


class ProbeBackoff:
    """When to try a switched-off method again."""

    def __init__(self, first: int, most: int) -> None:
        self.first, self.most = first, most
        self.every = first      # off rounds between probes now
        self.since = 0          # off rounds since the last probe
        self.probing = False    # the round just started is a probe, not judged yet

    def due(self) -> bool:
        """Count one round spent off; True when this round is a probe."""
        self.since += 1
        if self.since < self.every:
            return False
        self.since = 0
        self.every = min(self.every * 2, self.most)  # reset when it pays again
        self.probing = True
        return True

    def reset(self) -> None:
        """It paid: the next time it is switched off, probe soon again."""
        self.every = self.first
