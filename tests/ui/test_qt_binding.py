"""Guards against a Qt binding that corrupts reference counts (PySide6 6.12.0 on Python < 3.12).

That release drops a reference to ``True`` on every ``Signal.emit()``; with ~600
references to True at start-up the app aborts ("deallocating True") after a few
seconds of streaming. pyproject.toml excludes it; this test says so if it comes back.
"""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import QObject, Signal


class _Emitter(QObject):
    happened = Signal(str, float)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="True and None are immortal from Python 3.12")
def test_emitting_signals_keeps_reference_counts(qapp):
    emitter = _Emitter()
    received = []
    emitter.happened.connect(lambda text, value: received.append(value))
    true_before, none_before = sys.getrefcount(True), sys.getrefcount(None)
    for _ in range(200):
        emitter.happened.emit("x", 0.5)
    assert len(received) == 200
    assert sys.getrefcount(True) >= true_before - 5, "this PySide6 leaks references to True on emit"
    assert sys.getrefcount(None) >= none_before - 50, "this PySide6 leaks references to None on slot calls"
