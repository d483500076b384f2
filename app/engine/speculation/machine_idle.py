"""How many of this process's cores sat idle since the last look (Linux's /proc/stat).

The thread chooser (``thread_policy.py``) measures its own threads' CPU share, which
says whether *they* had their cores; it cannot say whether a core is free for one
more thread. Trying one more thread to find out costs a window of steps at the
barrier's pace, two to three times dearer when the core is taken (issue 25: those
probes and the first window cost a fifth of the speed under load). The machine's own
idle time answers for free: a probe up is worth its cost only while about a core's
worth of the cores this process may run on sat idle.

The draft's steps reach its chooser all at once after each draft, so two of its windows
can end microseconds apart, too soon for /proc/stat to tell: such a look answers as the
last one that could tell did, never "unknown" (which would allow a probe up onto a taken
core).

Only the CPUs in this process's affinity count (a container's cpuset). Where
/proc/stat cannot be read (macOS, Windows) the answer is None and the chooser probes
as it always did.
"""

from __future__ import annotations

import os

STAT = "/proc/stat"
MIN_JIFFIES = 5  # per CPU (10 ms each, usually) before an answer means anything


def _allowed_cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


class MachineIdle:
    """``idle()``: idle cores (0 .. cores) since the previous call (since the last look long
    enough to tell, and its answer, when the call comes too soon), or None when unknown."""

    def __init__(self, path: str = STAT, cpus: set[int] | None = None) -> None:
        self._path = path
        self._cpus = _allowed_cpus() if cpus is None else cpus
        self._last = self._read()
        self._answer: float | None = None  # the last look long enough to tell

    def _read(self) -> dict[int, tuple[int, int]] | None:
        """Per allowed CPU: (all jiffies, idle + iowait jiffies)."""
        try:
            with open(self._path, "rb") as stat:
                lines = stat.read(1 << 16).splitlines()
        except OSError:
            return None
        counts = {}
        for line in lines:
            fields = line.split()
            if not fields or not fields[0].startswith(b"cpu") or fields[0] == b"cpu":
                continue
            try:
                cpu = int(fields[0][3:])
                values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
            except ValueError:
                return None
            if len(values) >= 5 and (self._cpus is None or cpu in self._cpus):
                counts[cpu] = (sum(values), values[3] + values[4])
        return counts or None

    def idle(self) -> float | None:
        now, last = self._read(), self._last
        if now is None or last is None:
            self._last = now
            return None
        idle, seen = 0.0, False
        for cpu, (total, free) in now.items():
            before = last.get(cpu)
            if before is None or total - before[0] < MIN_JIFFIES:
                continue
            seen = True
            idle += min(1.0, max(0.0, (free - before[1]) / (total - before[0])))
        if not seen:
            # Too short to tell (a fast GPU's window, or the draft's steps, which reach the
            # chooser all at once after its draft): keep counting from the last look, and
            # answer as it did. None here would read as "cannot be known", and the chooser
            # would probe up onto a core that is taken.
            return self._answer
        self._last, self._answer = now, idle
        return idle
