"""The auto draft-length policy: picks the k the cost model favours, and stops when it does not pay."""

import pytest

from app.engine.adaptive import (AUTO_MAX, CONFIDENCE_BANDS, COST_WINDOW, OFF_AFTER, PROBE_EVERY, WARMUP_ROUNDS,
                                 DraftLengthPolicy)
from app.engine.types import SpecConfig

AUTO = SpecConfig(draft_max="auto")


def trained(accept: float, draft_step: float, verify: dict[int, float], rounds: int = 200) -> DraftLengthPolicy:
    policy = DraftLengthPolicy()
    # Every position judged `rounds` times, a fraction `accept` of them accepted.
    for i in range(rounds):
        policy.observe_round(drafted=AUTO_MAX, accepted=AUTO_MAX - 1)
    policy._accepted = [accept * n for n in policy._judged_at]
    policy._pooled = [accept * policy._pooled[1], policy._pooled[1]]
    policy.observe_draft([draft_step] * 1)
    for batch, seconds in verify.items():
        policy.observe_verify(batch, seconds)
    return policy


def test_cheap_draft_and_high_acceptance_draft_long():
    policy = trained(0.97, 0.05, {1: 1.0, 9: 1.1})
    assert policy.best_length() >= 8


def test_memory_bound_demo_like_costs_pick_a_middle_length():
    # Measured on the demo pair: c ~ 0.4, v(6) ~ 1.6, acceptance ~ 0.94.
    policy = trained(0.94, 0.4, {1: 1.0, 6: 1.6})
    assert 3 <= policy.best_length() <= 6


def test_useless_or_expensive_drafts_switch_speculation_off_and_probe():
    assert trained(0.05, 0.3, {1: 1.0, 5: 1.5}).best_length() == 0
    expensive = trained(0.9, 1.5, {1: 1.0, 5: 1.2})
    assert expensive.best_length() == 0
    lengths = [expensive.draft_length(AUTO, 10) for _ in range(OFF_AFTER + PROBE_EVERY * 2)]
    # It keeps drafting until the verdict has been the same OFF_AFTER times...
    assert all(k > 0 for k in lengths[:OFF_AFTER - 1])
    # ... then runs plainly, probing once every PROBE_EVERY rounds.
    rest = lengths[OFF_AFTER - 1:]
    assert rest.count(0) == len(rest) - 2
    assert [i for i, k in enumerate(rest) if k] == [PROBE_EVERY - 1, 2 * PROBE_EVERY - 1]


def test_speculation_comes_back_as_soon_as_it_pays_again():
    policy = trained(0.9, 1.5, {1: 1.0, 5: 1.2})
    for _ in range(OFF_AFTER + 1):
        policy.draft_length(AUTO, 10)
    assert policy.draft_length(AUTO, 10) == 0
    for _ in range(COST_WINDOW * 2):
        policy.observe_draft([0.05] * 1)  # the draft got cheap (say, the GPU freed up)
    assert policy.draft_length(AUTO, 10) > 0


def test_learning_from_rounds_moves_the_estimates():
    policy = DraftLengthPolicy()
    for _ in range(100):
        policy.observe_round(drafted=4, accepted=0)
    assert policy.accept[0] < 0.2
    # Never judged: the pooled rate, which the rejections pulled down from the prior.
    assert policy.accept[1] == policy.accept[AUTO_MAX - 1] < 0.5
    policy.observe_draft([0.4 / 4] * 4)
    policy.observe_verify(1, 1.0)
    policy.observe_verify(5, 1.4)
    assert policy.verify_cost(3) == pytest.approx(1.2)
    assert policy.best_length() == 0


def test_deep_positions_judged_rarely_lean_on_the_pooled_rate():
    policy = DraftLengthPolicy()
    for _ in range(200):
        policy.observe_round(drafted=4, accepted=4)   # short drafts, all accepted
    policy.observe_round(drafted=8, accepted=5)       # one deep draft, rejected at position 6
    accept = policy.accept
    assert min(accept[:5]) > 0.95
    # The well-judged positions agree with each other: one rejection is chance, not a verdict.
    assert accept[6] > accept[5] > 0.95
    assert accept[6] == accept[11] > 0.95             # never judged: the pooled rate


def test_positions_that_truly_differ_keep_their_own_rates():
    policy = DraftLengthPolicy()
    for i in range(400):
        # The first two drafts are nearly always right, the third only 3 times in 5.
        policy.observe_round(drafted=4, accepted=2 if i % 5 < 2 else 4)
    accept = policy.accept
    assert accept[0] > 0.95 and accept[1] > 0.95
    assert 0.55 < accept[2] < 0.7


def test_verify_line_leaves_out_the_single_token_path_once_batches_are_measured():
    policy = DraftLengthPolicy()
    policy.observe_verify(1, 0.020)   # the matrix-vector path: cheaper than the line
    policy.observe_verify(2, 0.028)
    policy.observe_verify(6, 0.040)
    assert policy.verify_cost(1) == 0.020
    assert policy.verify_cost(4) == pytest.approx(0.034)
    assert policy.verify_cost(10) == pytest.approx(0.052)


def test_one_lucky_measurement_of_a_rare_batch_size_does_not_sway_the_draft_length():
    policy = trained(0.97, 0.012, {1: 0.024})
    for _ in range(COST_WINDOW):
        policy.observe_draft([0.018, 0.012])
        policy.observe_verify(9, 0.050)    # the length auto settled on...
        policy.observe_verify(13, 0.062)   # ... and one it explored as often
    settled = policy.draft_length(AUTO, 20)
    assert settled >= 6
    policy.observe_verify(6, 0.030)        # tried once, on a quiet moment: 10 ms under the line
    assert policy.verify_cost(6) == pytest.approx(0.041, abs=0.002)
    assert abs(policy.draft_length(AUTO, 20) - settled) <= 1  # the line moved by 1 ms, not 10


def test_fixed_draft_max_is_respected_and_capped_by_room():
    policy = DraftLengthPolicy()
    assert policy.draft_length(SpecConfig(draft_max=6), 10) == 6
    assert policy.draft_length(SpecConfig(draft_max=6), 2) == 2
    assert policy.p_min(SpecConfig(draft_max=6, p_min=0.0)) == 0.0
    assert policy.p_min(SpecConfig(draft_max=6, p_min=0.3)) == 0.3


def test_auto_confidence_floor_is_learned_from_how_unsure_drafts_fare():
    policy = DraftLengthPolicy()
    assert policy.p_min(AUTO) == 0.0  # until unsure drafts are seen to fail
    for _ in range(30):
        policy.observe_confidence(0.03, accepted=False)
        policy.observe_confidence(0.08, accepted=False)
        policy.observe_confidence(0.15, accepted=True)
        policy.observe_confidence(0.9, accepted=True)
    assert policy.p_min(AUTO) == CONFIDENCE_BANDS[2]  # below 0.1 they fail, 0.1-0.2 they pass
    assert policy.p_min(SpecConfig(draft_max="auto", p_min=0.5)) == 0.5  # the user's floor still holds
    for _ in range(30):
        policy.observe_confidence(0.01, accepted=False)
        policy.observe_confidence(0.03, accepted=True)  # ... and then they start to pass
        policy.observe_confidence(0.08, accepted=True)
    assert policy.p_min(AUTO) == CONFIDENCE_BANDS[0]


def test_warm_up_keeps_speculating_and_one_stall_does_not_switch_it_off():
    policy = DraftLengthPolicy()
    policy.observe_verify(1, 0.020)
    policy.observe_verify(6, 0.030)
    policy.observe_draft([0.005] * 5)
    policy.observe_draft([2.0] * 5)  # the machine stalled during one draft
    assert policy.best_length() >= 1  # still warming up: keeps drafting
    for _ in range(3):
        policy.observe_draft([0.005] * 5)
    assert policy.draft_step == 0.005


def test_a_burst_of_stalls_does_not_switch_speculation_off():
    policy = trained(0.95, 0.005, {1: 0.020, 6: 0.030})
    for _ in range(COST_WINDOW):
        policy.observe_draft([0.005] * 5)
        policy.observe_verify(6, 0.030)
    k = policy.draft_length(AUTO, 10)
    assert k > 0
    # Another program takes the CPU for a while: a third of the recent rounds, and
    # so of the recent draft steps and verifications, are ten times slower.
    for _ in range(COST_WINDOW // 3):
        policy.observe_draft([0.05])
        policy.observe_verify(6, 0.3)
    for _ in range(2 * COST_WINDOW // 3 // 4):
        policy.observe_draft([0.005, 0.05, 0.05, 0.05, 0.05])
    lengths = [policy.draft_length(AUTO, 10) for _ in range(WARMUP_ROUNDS)]
    assert min(lengths) > 0
    assert policy.draft_step == policy.first_step == 0.005


def test_a_lasting_change_in_costs_does_switch_it_off():
    policy = trained(0.95, 0.005, {1: 0.020, 6: 0.030})
    assert policy.draft_length(AUTO, 10) > 0
    for _ in range(COST_WINDOW * 2):
        policy.observe_draft([0.05] * 1)  # the draft now costs more than the target
    lengths = [policy.draft_length(AUTO, 10) for _ in range(OFF_AFTER + 2)]
    assert lengths[-1] == 0


def test_a_dear_first_draft_step_makes_longer_drafts_pay():
    """The first step of a round runs on caches the target just flushed: a fixed cost per
    round, which longer drafts share out."""
    even = trained(0.95, 0.4, {1: 1.0, 2: 1.2, 6: 1.6})
    dear_first = trained(0.95, 0.4, {1: 1.0, 2: 1.2, 6: 1.6})
    for _ in range(COST_WINDOW):
        even.observe_draft([0.4, 0.4, 0.4])
        dear_first.observe_draft([1.0, 0.4, 0.4])
    assert dear_first.first_step == 1.0 and dear_first.draft_step == even.draft_step == 0.4
    assert dear_first.best_length() > even.best_length() > 0


def test_draft_cut_ends_a_draft_where_a_rejection_becomes_likely():
    assert DraftLengthPolicy().draft_cut(SpecConfig(draft_max=6)) is None  # a fixed length is the user's
    policy = trained(0.97, 0.005, {1: 0.020, 4: 0.024, 12: 0.032})
    assert policy.draft_cut(AUTO) is None  # no length chosen yet, so no floor
    for _ in range(40):
        policy.observe_confidence(0.95, accepted=True)  # sure drafts always pass
        policy.observe_confidence(0.4, accepted=True)   # unsure ones pass two times in three
        policy.observe_confidence(0.4, accepted=True)
        policy.observe_confidence(0.4, accepted=False)
    assert policy.p_min(AUTO) == 0.0  # worth proposing: more often right than wrong ...
    k = policy.draft_length(AUTO, 20)
    assert k >= 6
    go_on = policy.draft_cut(AUTO)
    assert all(go_on(0.95) for _ in range(k))  # a run of sure tokens drafts the whole length
    assert not go_on(0.4)                       # ... but not worth drafting past
    go_on = policy.draft_cut(AUTO)              # each round starts afresh
    assert go_on(0.95) and not go_on(0.4)
    assert policy.band_accept[-1] > 0.95 and policy.band_accept[5] == pytest.approx(2 / 3, abs=0.05)
