"""``tandem bench --busy N``: N busy-loop child processes, the load a desktop always has
(a browser, an editor, the window's own UI thread), started and stopped by the bench.

Each child spins on one core until it is stopped, its time limit passes or its parent
is gone, whichever comes first: a bench killed outright still leaves no spinner behind
for longer than a fraction of a second (the parent check), and none past the limit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

BUSY_LIMIT_S = 3600.0  # no child outlives this, whatever happens to the bench

# Spins; every ~50k turns checks the clock and whether the bench that started it is alive.
_SPIN = """
import os, time
parent, end = {parent}, time.monotonic() + {limit}
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(50000):
        pass
"""


@contextmanager
def busy_cores(n: int, limit_s: float = BUSY_LIMIT_S) -> Iterator[list[subprocess.Popen]]:
    """``n`` spinning children for the duration of the block; all of them are gone after it."""
    children: list[subprocess.Popen] = []
    code = _SPIN.format(parent=os.getpid(), limit=float(limit_s))
    try:
        for _ in range(n):
            children.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield children
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
