"""The auto draft-length policy: picks the k the cost model favours, and stops when it does not pay."""

from app.engine.adaptive import AUTO_MAX, PROBE_EVERY, DraftLengthPolicy
from app.engine.types import SpecConfig

AUTO = SpecConfig(draft_max="auto")


def trained(accept: float, draft_step: float, verify: dict[int, float], rounds: int = 200) -> DraftLengthPolicy:
    policy = DraftLengthPolicy()
    policy.draft_step = draft_step
    policy.verify = dict(verify)
    policy.accept = [accept] * AUTO_MAX
    policy._judged = rounds
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
    lengths = [expensive.draft_length(AUTO, 10) for _ in range(PROBE_EVERY * 2)]
    assert lengths.count(0) == len(lengths) - 2 and lengths.count(2) == 2


def test_learning_from_rounds_moves_the_estimates():
    policy = DraftLengthPolicy()
    for _ in range(100):
        policy.observe_round(drafted=4, accepted=0)
    assert policy._judged == 100
    assert policy.accept[0] < 0.05
    assert policy.accept[1] == 0.9  # never judged: still the prior
    policy.observe_draft(4, 0.4)
    policy.observe_verify(1, 1.0)
    policy.observe_verify(5, 1.4)
    assert policy.verify_cost(3) == __import__("pytest").approx(1.2)
    assert policy.best_length() == 0


def test_fixed_draft_max_is_respected_and_capped_by_room():
    policy = DraftLengthPolicy()
    assert policy.draft_length(SpecConfig(draft_max=6), 10) == 6
    assert policy.draft_length(SpecConfig(draft_max=6), 2) == 2
    assert policy.p_min(SpecConfig(draft_max=6, p_min=0.0)) == 0.0
    assert policy.p_min(AUTO) > 0.0


def test_warm_up_keeps_speculating_and_one_stall_does_not_switch_it_off():
    policy = DraftLengthPolicy()
    policy.observe_verify(1, 0.020)
    policy.observe_verify(6, 0.030)
    policy.observe_draft(5, 5 * 0.005)
    policy.observe_draft(5, 5 * 2.0)  # the machine stalled during one draft
    assert policy.draft_step <= 3 * 0.005 * 1.01
    assert policy.best_length() >= 1  # still warming up: keeps drafting
