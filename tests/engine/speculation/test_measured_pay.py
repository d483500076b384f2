"""Auto's guard that speculation is never slower than none: whole rounds as measured
(``measured_pay.py``), and the auto policy that heeds it against its own model."""

from __future__ import annotations

from app.engine.speculation.draft import Draft
from app.engine.speculation.draft_policy import AutoDraftLength
from app.engine.speculation.measured_pay import (JUDGE_AFTER, OFF_AFTER, PLAIN_ROUNDS_MIN, PROBE_FIRST,
                                                 PROBE_ROUNDS, SLACK, MeasuredPay)

PLAIN = 0.020  # a plain step: 50 tokens/s


def drafted(pay: MeasuredPay, rounds: int, tokens_per_second: float, plain_step: float = PLAIN) -> None:
    for _ in range(rounds):
        pay.observe(True, 2, 2 / tokens_per_second, plain_step)


def off_rounds_before_a_probe(pay: MeasuredPay) -> int:
    n = 0
    while pay.holds_off():
        n += 1
        pay.observe(False, 1, PLAIN, PLAIN)
    return n


def test_drafting_slower_than_plain_stops_after_its_verdicts_and_is_probed_later_ever_more_rarely():
    pay = MeasuredPay()
    drafted(pay, JUDGE_AFTER + OFF_AFTER - 2, 40.0)
    assert not pay.off  # one verdict short
    drafted(pay, 1, 40.0)
    assert pay.off and [round(speed, 6) for speed in pay.speeds] == [40.0, 50.0]
    assert off_rounds_before_a_probe(pay) == PROBE_FIRST - 1
    drafted(pay, PROBE_ROUNDS, 40.0)  # the probe: still slower
    assert pay.off
    assert off_rounds_before_a_probe(pay) == 2 * PROBE_FIRST - 1  # the next one comes twice as late
    drafted(pay, PROBE_ROUNDS, 80.0)  # the text became predictable: it pays again
    assert not pay.off and not pay.holds_off()


def test_a_draft_within_the_slack_of_plain_and_one_that_pays_keep_drafting():
    for speed in (50.0 * (1 - SLACK) + 0.1, 50.0, 90.0):
        pay = MeasuredPay()
        drafted(pay, 200, speed)
        assert not pay.off and not pay.holds_off(), speed


def test_acceptance_that_decays_over_a_long_reply_is_caught():
    pay = MeasuredPay()
    drafted(pay, 300, 80.0)     # a reply's start: drafting pays
    assert not pay.off
    drafted(pay, 30, 35.0)      # far into it, the draft no longer follows
    assert pay.off


def test_plain_rounds_as_measured_replace_the_target_step_as_what_drafting_must_beat():
    pay = MeasuredPay()
    for _ in range(PLAIN_ROUNDS_MIN):
        pay.observe(False, 1, 0.030, PLAIN)  # plain rounds, all in, cost more than the target's step
    drafted(pay, JUDGE_AFTER + OFF_AFTER, 40.0)  # slower than the step's 50, faster than a round's 33
    assert not pay.off and pay.speeds[1] == 1 / 0.030


def test_without_a_plain_figure_nothing_is_judged():
    pay = MeasuredPay()
    drafted(pay, 50, 1.0, plain_step=None)
    assert not pay.off


def feed_model_that_says_drafting_pays(policy: AutoDraftLength, length: int) -> None:
    """Cheap draft steps and drafts always accepted: the model's expected speed is far above plain."""
    policy.observe_draft([0.001] * length)
    policy.observe_verify(length + 1, PLAIN + 0.001 * length)
    policy.observe_verify(1, PLAIN)
    policy.observe_round(Draft(list(range(length)), probs=[0.99] * length), length, 0, True)
    policy.observe_overhead(0.0)


def test_auto_heeds_the_measured_rounds_over_its_own_model():
    policy = AutoDraftLength(trees="off")
    lengths = []
    for _ in range(60):
        plan = policy.plan_round(20)
        lengths.append(plan.length)
        if plan.length:
            feed_model_that_says_drafting_pays(policy, plan.length)
            policy.observe_outcome(True, plan.length + 1, 3 * (plan.length + 1) * PLAIN)  # a third of plain's speed
        else:
            policy.observe_verify(1, PLAIN)
            policy.observe_outcome(False, 1, PLAIN)
    assert policy.best_draft().length > 0  # the model still says drafting pays ...
    first_plain = lengths.index(0)
    assert first_plain == JUDGE_AFTER + OFF_AFTER - 1  # ... the rounds said otherwise, and won
    assert lengths[first_plain:first_plain + PROBE_FIRST - 1] == [0] * (PROBE_FIRST - 1)
    assert all(lengths[first_plain + PROBE_FIRST - 1:first_plain + PROBE_FIRST - 1 + PROBE_ROUNDS])  # the probe
