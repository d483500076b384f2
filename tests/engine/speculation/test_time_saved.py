"""Time saved per reply: the reply's tokens at the measured plain step cost, minus its time."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.speculation.draft_costs import RecentCost
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine, plain_step_estimate
from app.engine.types import SamplingConfig, SpecConfig, Stats
from app.session.records import stats_from_record, stats_to_record
from app.ui.stats_format import message_summary, time_saved

from markov_backend import MarkovBackend


def test_the_plain_step_cost_comes_from_measured_one_token_steps_and_is_kept_with_the_reply():
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2.0, (6, 6))
    engine = SpeculativeEngine(MarkovBackend(logits), ModelDrafter(MarkovBackend(logits), 6))
    # A same-logits draft is always right: only four-token drafts, yet the prompt's last
    # cached token is evaluated alone, a plain step measured before the first reply.
    fresh = engine.generate([0, 1, 2], SamplingConfig(), SpecConfig(draft_max=4), max_tokens=12)
    list(fresh)
    assert fresh.stats.plain_step_seconds > 0 and fresh.stats.seconds_saved is not None
    plain = engine.generate([0, 1], SamplingConfig(), SpecConfig(enabled=False), max_tokens=12)
    list(plain)
    assert plain.stats.plain_step_seconds > 0
    assert plain.stats.seconds_saved is None  # no speculation, nothing to compare
    spec = engine.generate([0, 1], SamplingConfig(), SpecConfig(draft_max=4), max_tokens=12)
    list(spec)
    stats = spec.stats
    assert stats.speculative and stats.plain_step_seconds > 0
    assert stats.seconds_saved == pytest.approx(stats.tokens * stats.plain_step_seconds - stats.seconds)
    assert stats.speedup == pytest.approx(stats.tokens * stats.plain_step_seconds / stats.seconds)
    record = stats_to_record(stats)
    assert record["seconds_saved"] == pytest.approx(stats.seconds_saved, abs=1e-4)
    again = stats_from_record(record)
    assert again is not None and again.plain_step_seconds == pytest.approx(stats.plain_step_seconds, abs=1e-6)


def test_an_old_record_without_the_cost_shows_no_saving():
    old = stats_from_record({"tokens": 10, "seconds": 1.0, "speculative": True, "drafted": 4, "accepted": 3})
    assert old is not None and old.seconds_saved is None and time_saved(old) is None
    assert "saved" not in message_summary(old)


def test_the_figure_reads_as_seconds_saved_and_a_speedup():
    stats = Stats(tokens=100, seconds=5.0, speculative=True, drafted=80, accepted=60, rounds=30,
                  plain_step_seconds=0.071)
    assert time_saved(stats) == "2.1 s saved · 1.4×"
    assert "2.1 s saved · 1.4×" in message_summary(stats)
    slower = Stats(tokens=10, seconds=2.0, speculative=True, plain_step_seconds=0.1)
    assert time_saved(slower) == "1.0 s lost · 0.50×"


def test_a_plain_step_timed_on_a_busy_machine_cannot_exceed_the_batches_the_reply_verified():
    rng = np.random.default_rng(5)
    logits = rng.normal(0, 2.0, (6, 6))
    engine = SpeculativeEngine(MarkovBackend(logits), ModelDrafter(MarkovBackend(logits), 6))
    for _ in range(5):
        engine._plain_steps.add(100.0)  # as if the scheduler had stalled every earlier plain step
    reply = engine.generate([0, 1, 2], SamplingConfig(), SpecConfig(draft_max=4), max_tokens=12)
    list(reply)
    assert 0 < reply.stats.plain_step_seconds < 1.0
    assert reply.stats.speedup is not None and reply.stats.speedup < 50


def cost(*seconds: float) -> RecentCost:
    recent = RecentCost()
    for value in seconds:
        recent.add(value)
    return recent


def test_the_plain_step_is_bounded_by_the_cheapest_batch_size_verified():
    """A plain step timed while the window drew (0.1 s against a real 0.025) is capped by
    the reply's cheapest batch size, not by the median over all its batches: mostly
    nine-token verifications would let it stand at twice the real cost."""
    batches = {2: cost(0.031, 0.032), 9: cost(0.05, 0.052, 0.051, 0.05, 0.049), 5: cost(0.04)}
    assert plain_step_estimate(0.1, batches) == pytest.approx(0.0315)
    assert plain_step_estimate(0.024, batches) == 0.024  # a real plain step stands
    assert plain_step_estimate(0.1, {}) == 0.1            # nothing verified in batches: nothing to cap with
    assert plain_step_estimate(None, batches) == 0.0      # never measured
