"""The stream bench runs and reports a number (its figure is a benchmark, not a test)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from stream_bench import StreamBenchResult, run_stream_bench  # noqa: E402  (a tool, not a package)
from window_fixtures import tandem_home  # noqa: E402,F401  (autouse: TANDEM_HOME under tmp_path)


def test_a_one_second_stream_reaches_the_view_and_reports_the_worst_stall(qtbot):
    result = run_stream_bench(rate=2000, seconds=1.0)
    assert isinstance(result, StreamBenchResult)
    assert result.tokens == 2000
    assert math.isfinite(result.worst_stall_ms) and result.worst_stall_ms >= 0
    assert 0 < result.batches < result.tokens  # coalesced
    assert "worst event-loop stall" in result.report()


def test_the_same_stream_through_a_real_engine_process(qtbot):
    result = run_stream_bench(rate=2000, tokens=600, engine="process")
    assert result.tokens == 600  # every token crossed the channel and reached the view
    assert 0 < result.batches < result.tokens  # in batches, not one message per token
