"""``tandem --self-test``: the self-test's checks (``app.session.selftest``) on the
configured pair, or the demo pair, printed as a report; exit 0 when it passes."""

from __future__ import annotations

import argparse
import sys


def run_self_test(args: argparse.Namespace) -> int:
    from app.terminal.shared import TerminalProgress, load

    progress = TerminalProgress()
    session = load(args, progress)
    try:
        print("Checking speculation (64 tokens, greedy, with and without a draft)...", file=sys.stderr)
        report = session.self_test()
    finally:
        session.close()
    print("\n".join(report.lines()))
    return 0 if report.ok else 1
