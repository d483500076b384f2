"""``python -m app --engine ADDRESS``: connect back to the front end that started us, then serve it.

The authentication key comes on stdin (one hex line), never on the command line or in
the environment, where other processes could read it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from multiprocessing.connection import Client



def _die_with_parent() -> None:
    """Linux: SIGTERM when the process that started us ends, as a net under the channel's
    end-of-file (the reader thread's signal); the handler leaves no load mark behind."""
    def on_term(_signum, _frame) -> None:
        from app.enginehost.host import parent_gone

        parent_gone()

    signal.signal(signal.SIGTERM, on_term)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(0)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m app --engine ADDRESS (key on stdin)", file=sys.stderr)
        return 2
    _die_with_parent()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="tandem engine: %(levelname)s %(name)s: %(message)s")
    key = bytes.fromhex(sys.stdin.readline().strip())
    try:
        conn = Client(argv[0], authkey=key)
    except (OSError, EOFError) as exc:
        print(f"tandem engine: cannot reach the window: {exc}", file=sys.stderr)
        return 1
    from app.enginehost.host import EngineHost

    return EngineHost(conn).run()
