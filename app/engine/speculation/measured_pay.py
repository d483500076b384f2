"""Drafting against plain decoding as measured: auto's guard that speculation is never
slower than none.

Auto's length model (``draft_policy.AutoDraftLength.best_draft``) predicts a round's
speed from the medians of its parts and the acceptance of each draft position. What it
leaves out can make drafting lose while the model says it pays: the host's work around
a round, a drafter's catching up or reading that a median hides, acceptance that decays
as a long reply goes on. So the whole of each round is measured too, from the round's
start to its last token: the speed of the last ``WINDOW`` rounds the drafter drafted
against a plain round's (its median, all in; a plain target step where no plain round
ran yet). ``OFF_AFTER`` verdicts in a row that drafting is slower by more than ``SLACK``
switch drafting off, whatever the model says. Off, a probe of ``PROBE_ROUNDS`` drafted
rounds comes after ``PROBE_FIRST`` plain rounds, then twice as late each time it still
does not pay (up to ``PROBE_MOST``); a probe that pays switches drafting back on, to be
judged afresh.

A copy from the context is neither: it costs no draft step and is tried either way.
"""

from __future__ import annotations

from collections import deque

from app.engine.speculation.draft_costs import RecentCost
from app.engine.speculation.probes import ProbeBackoff, rate

WINDOW = 16         # drafted rounds the measured speed is taken over
JUDGE_AFTER = 8     # drafted rounds before a first verdict
OFF_AFTER = 4       # verdicts in a row that drafting is slower before it stops
SLACK = 0.03        # slower than plain by more than this is a verdict: speculation stays at 0.97x or above
PROBE_ROUNDS = 4    # drafted rounds a probe judges together (one round is a coin toss of its acceptance)
PROBE_FIRST = 16    # plain rounds before the first probe
PROBE_MOST = 256    # plain rounds between probes at the most
PLAIN_ROUNDS_MIN = 4  # plain rounds measured before their median replaces the target's step


class MeasuredPay:
    """Whether drafting pays, by what whole rounds took."""

    def __init__(self) -> None:
        self._drafted: deque[tuple[int, float]] = deque(maxlen=WINDOW)
        self._plain = RecentCost()      # a plain round's seconds, all in
        self._votes = 0
        self._probes = ProbeBackoff(PROBE_FIRST, PROBE_MOST)
        self._probe_left = 0            # drafted rounds left in the probe under way
        self.off = False
        self.speeds: tuple[float, float] = (0.0, 0.0)  # drafting's and plain's tokens/s at the last verdict

    def holds_off(self) -> bool:
        """Asked once a round the model would draft in: True keeps this round plain. Counts
        the round; where a probe is due it starts one (False, for ``PROBE_ROUNDS`` rounds)."""
        if not self.off or self._probe_left:
            return False
        if self._probes.due():
            self._probe_left = PROBE_ROUNDS
            self._drafted.clear()  # the probe is judged on its own rounds: the machine may have changed
            return False
        return True

    def observe(self, drafted: bool, written: int, seconds: float, plain_step: float | None) -> None:
        """One round: ``drafted`` (the drafter's guess was verified) or plain, the tokens it
        wrote and the seconds it took, all in; ``plain_step``: the target's plain step."""
        seconds = max(seconds, 1e-9)
        if not drafted:
            self._plain.add(seconds)
            return
        self._drafted.append((written, seconds))
        plain = self._plain.value if len(self._plain) >= PLAIN_ROUNDS_MIN else plain_step
        if not plain:
            return
        self.speeds = speed, plain_speed = rate(self._drafted), 1.0 / plain
        slower = speed < (1.0 - SLACK) * plain_speed
        if self._probe_left:
            self._probe_left -= 1
            if self._probe_left == 0:
                self._probes.probing = False
                if slower:
                    return  # still off; the next probe comes later (ProbeBackoff.due doubled it)
                self.off, self._votes = False, 0
                self._probes.reset()
            return
        if self.off or len(self._drafted) < JUDGE_AFTER:
            return
        self._votes = self._votes + 1 if slower else 0
        if self._votes >= OFF_AFTER:
            self.off, self._votes = True, 0
