"""The auto draft-length policy: picks the k the cost model favours, and stops when it does not pay."""


import numpy as np
import pytest

from app.engine.speculation.acceptance import CONFIDENCE_BANDS
from app.engine.speculation.draft_costs import COST_WINDOW
from app.engine.speculation.draft_policy import (AUTO_MAX, OFF_AFTER, PROBE_EVERY, WARMUP_ROUNDS, AutoDraftLength,
                                     FixedDraftLength, draft_policy)
from app.engine.speculation.draft import Draft
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig

from markov_backend import MarkovBackend

AUTO = SpecConfig(draft_max="auto")


def judged(policy: AutoDraftLength, drafted: int, accepted: int) -> None:
    """One round whose ``drafted`` tokens the target judged, keeping the first ``accepted``."""
    policy.observe_round(Draft(tokens=[0] * drafted), accepted, 0, greedy=True)


def length(policy: AutoDraftLength, limit: int = 10) -> int:
    return policy.plan_round(limit).length


def trained(accept: float, draft_step: float, verify: dict[int, float], rounds: int = 200) -> AutoDraftLength:
    policy = AutoDraftLength()
    # Every position judged `rounds` times, a fraction `accept` of them accepted.
    for i in range(rounds):
        judged(policy, drafted=AUTO_MAX, accepted=AUTO_MAX - 1)
    positions = policy.positions
    positions._accepted = [accept * n for n in positions._judged_at]
    positions._pooled = [accept * positions._pooled[1], positions._pooled[1]]
    policy.observe_draft([draft_step] * 1)
    for batch, seconds in verify.items():
        policy.observe_verify(batch, seconds)
    return policy


def test_cheap_draft_and_high_acceptance_draft_long():
    policy = trained(0.97, 0.05, {1: 1.0, 9: 1.1})
    assert policy.best_draft().length >= 8


def test_memory_bound_demo_like_costs_pick_a_middle_length():
    # Measured on the demo pair: c ~ 0.4, v(6) ~ 1.6, acceptance ~ 0.94.
    policy = trained(0.94, 0.4, {1: 1.0, 6: 1.6})
    assert 3 <= policy.best_draft().length <= 6


def test_useless_or_expensive_drafts_switch_speculation_off_and_probe():
    assert trained(0.05, 0.3, {1: 1.0, 5: 1.5}).best_draft().length == 0
    expensive = trained(0.9, 1.5, {1: 1.0, 5: 1.2})
    assert expensive.best_draft().length == 0
    lengths = [length(expensive, 10) for _ in range(OFF_AFTER + PROBE_EVERY * 2)]
    # It keeps drafting until the verdict has been the same OFF_AFTER times...
    assert all(k > 0 for k in lengths[:OFF_AFTER - 1])
    # ... then runs plainly, probing once every PROBE_EVERY rounds.
    rest = lengths[OFF_AFTER - 1:]
    assert rest.count(0) == len(rest) - 2
    assert [i for i, k in enumerate(rest) if k] == [PROBE_EVERY - 1, 2 * PROBE_EVERY - 1]


def test_speculation_comes_back_as_soon_as_it_pays_again():
    policy = trained(0.9, 1.5, {1: 1.0, 5: 1.2})
    for _ in range(OFF_AFTER + 1):
        length(policy, 10)
    assert length(policy, 10) == 0
    for _ in range(COST_WINDOW * 2):
        policy.observe_draft([0.05] * 1)  # the draft got cheap (say, the GPU freed up)
    assert length(policy, 10) > 0


def test_learning_from_rounds_moves_the_estimates():
    policy = AutoDraftLength()
    for _ in range(100):
        judged(policy, drafted=4, accepted=0)
    assert policy.positions.rates[0] < 0.2
    # Never judged: the pooled rate, which the rejections pulled down from the prior.
    assert policy.positions.rates[1] == policy.positions.rates[AUTO_MAX - 1] < 0.5
    policy.observe_draft([0.4 / 4] * 4)
    policy.observe_verify(1, 1.0)
    policy.observe_verify(5, 1.4)
    assert policy.costs.verify_line()(3) == pytest.approx(1.2)
    assert policy.best_draft().length == 0


def test_deep_positions_judged_rarely_lean_on_the_pooled_rate():
    policy = AutoDraftLength()
    for _ in range(200):
        judged(policy, drafted=4, accepted=4)   # short drafts, all accepted
    judged(policy, drafted=8, accepted=5)       # one deep draft, rejected at position 6
    accept = policy.positions.rates
    assert min(accept[:5]) > 0.95
    # The well-judged positions agree with each other: one rejection is chance, not a verdict.
    assert accept[6] > accept[5] > 0.95
    assert accept[6] == accept[11] > 0.95             # never judged: the pooled rate


def test_positions_that_truly_differ_keep_their_own_rates():
    policy = AutoDraftLength()
    for i in range(400):
        # The first two drafts are nearly always right, the third only 3 times in 5.
        judged(policy, drafted=4, accepted=2 if i % 5 < 2 else 4)
    accept = policy.positions.rates
    assert accept[0] > 0.95 and accept[1] > 0.95
    assert 0.55 < accept[2] < 0.7


def test_verify_line_leaves_out_the_single_token_path_once_batches_are_measured():
    policy = AutoDraftLength()
    policy.observe_verify(1, 0.020)   # the matrix-vector path: cheaper than the line
    policy.observe_verify(2, 0.028)
    policy.observe_verify(6, 0.040)
    assert policy.costs.verify_line()(1) == 0.020
    assert policy.costs.verify_line()(4) == pytest.approx(0.034)
    assert policy.costs.verify_line()(10) == pytest.approx(0.052)


def test_one_lucky_measurement_of_a_rare_batch_size_does_not_sway_the_draft_length():
    policy = trained(0.97, 0.012, {1: 0.024})
    for _ in range(COST_WINDOW):
        policy.observe_draft([0.018, 0.012])
        policy.observe_verify(9, 0.050)    # the length auto settled on...
        policy.observe_verify(13, 0.062)   # ... and one it explored as often
    settled = length(policy, 20)
    assert settled >= 6
    policy.observe_verify(6, 0.030)        # tried once, on a quiet moment: 10 ms under the line
    assert policy.costs.verify_line()(6) == pytest.approx(0.041, abs=0.002)
    assert abs(length(policy, 20) - settled) <= 1  # the line moved by 1 ms, not 10


def test_one_stalled_measurement_of_a_rare_batch_size_does_not_bend_the_line():
    """A batch size seen once, while another program took the CPU (eight times its
    cost): a least-squares line followed it so far that auto drafted one token for
    hundreds of rounds (tests/engine/speculation/policy_trace.json's first stall)."""
    policy = AutoDraftLength()
    for _ in range(3):
        for batch in (2, 3, 5, 9):
            policy.observe_verify(batch, 0.020 + 0.002 * batch)
    policy.observe_verify(13, 8 * (0.020 + 0.002 * 13))  # once, stalled
    line = policy.costs.verify_line()
    assert line(2) == pytest.approx(0.024, abs=0.001)
    assert line(9) == pytest.approx(0.038, abs=0.001)
    assert line(13) < 0.050  # 0.046 on the line; 0.264 measured


def test_the_prompts_own_plain_step_tells_auto_what_a_plain_step_costs():
    """The engine evaluates the prompt's last token alone (a plain step) and hands its
    cost to the policy: extrapolated from batches, a single token's cost is wrong
    wherever one token runs a cheaper kernel than a batch."""
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2, (12, 12))
    policy = AutoDraftLength()
    engine = SpeculativeEngine(MarkovBackend(logits), ModelDrafter(MarkovBackend(logits), 12))
    seen: list[int] = []
    observe_verify = policy.observe_verify
    policy.observe_verify = lambda batch, seconds: (seen.append(batch), observe_verify(batch, seconds))
    list(engine.generate([1, 2, 3, 4], SamplingConfig(temperature=0.0), AUTO, max_tokens=12, policy=policy))
    assert seen[0] == 1 and 1 in policy.costs._verify  # before the first round's batch
    assert all(batch > 1 for batch in seen[1:])  # every round drafted: no other plain step
    assert policy.costs.verify_line()(1) == policy.costs._verify[1].value


def test_fixed_draft_max_is_respected_and_capped_by_room():
    policy = draft_policy(SpecConfig(draft_max=6))
    assert isinstance(policy, FixedDraftLength)
    assert policy.plan_round(10).length == 6
    assert policy.plan_round(2).length == 2
    # A fixed length is the user's: no floor or cut of the policy's own.
    assert policy.plan_round(10).p_min == 0.0 and policy.plan_round(10).go_on is None
    assert isinstance(draft_policy(AUTO), AutoDraftLength)


class _SpyDrafter(ModelDrafter):
    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.floors: list[float] = []

    def propose(self, context, n_max, sampling, rng, p_min, go_on=None, **branching):
        self.floors.append(p_min)
        return super().propose(context, n_max, sampling, rng, p_min, go_on, **branching)


def _floors_seen(spec: SpecConfig, policy=None) -> set[float]:
    logits = np.eye(4) * 4.0  # each token is most likely followed by itself
    drafter = _SpyDrafter(MarkovBackend(logits), 4)
    SpeculativeEngine(MarkovBackend(logits), drafter).generate([0, 1], SamplingConfig(), spec, 8, policy=policy).run()
    return set(drafter.floors)


def test_the_users_confidence_floor_holds_under_the_policys():
    assert _floors_seen(SpecConfig(draft_max=3, p_min=0.3)) == {0.3}
    learned = AutoDraftLength()
    for _ in range(30):
        learned.confidence.observe(0.08, accepted=False)  # unsure drafts fail: a floor of 0.1
    assert learned.p_min == CONFIDENCE_BANDS[2]
    assert _floors_seen(SpecConfig(draft_max="auto", p_min=0.0), learned) == {CONFIDENCE_BANDS[2]}
    assert _floors_seen(SpecConfig(draft_max="auto", p_min=0.5), learned) == {0.5}  # the user's floor still holds


def test_auto_confidence_floor_is_learned_from_how_unsure_drafts_fare():
    policy = AutoDraftLength()
    assert policy.p_min == 0.0  # until unsure drafts are seen to fail
    for _ in range(30):
        policy.confidence.observe(0.03, accepted=False)
        policy.confidence.observe(0.08, accepted=False)
        policy.confidence.observe(0.15, accepted=True)
        policy.confidence.observe(0.9, accepted=True)
    assert policy.p_min == CONFIDENCE_BANDS[2]  # below 0.1 they fail, 0.1-0.2 they pass
    for _ in range(30):
        policy.confidence.observe(0.01, accepted=False)
        policy.confidence.observe(0.03, accepted=True)  # ... and then they start to pass
        policy.confidence.observe(0.08, accepted=True)
    assert policy.p_min == CONFIDENCE_BANDS[0]


def test_warm_up_keeps_speculating_and_one_stall_does_not_switch_it_off():
    policy = AutoDraftLength()
    policy.observe_verify(1, 0.020)
    policy.observe_verify(6, 0.030)
    policy.observe_draft([0.005] * 5)
    policy.observe_draft([2.0] * 5)  # the machine stalled during one draft
    assert policy.best_draft().length >= 1  # still warming up: keeps drafting
    for _ in range(3):
        policy.observe_draft([0.005] * 5)
    assert policy.costs.draft_step == 0.005


def test_a_burst_of_stalls_does_not_switch_speculation_off():
    policy = trained(0.95, 0.005, {1: 0.020, 6: 0.030})
    for _ in range(COST_WINDOW):
        policy.observe_draft([0.005] * 5)
        policy.observe_verify(6, 0.030)
    k = length(policy, 10)
    assert k > 0
    # Another program takes the CPU for a while: a third of the recent rounds, and
    # so of the recent draft steps and verifications, are ten times slower.
    for _ in range(COST_WINDOW // 3):
        policy.observe_draft([0.05])
        policy.observe_verify(6, 0.3)
    for _ in range(2 * COST_WINDOW // 3 // 4):
        policy.observe_draft([0.005, 0.05, 0.05, 0.05, 0.05])
    lengths = [length(policy, 10) for _ in range(WARMUP_ROUNDS)]
    assert min(lengths) > 0
    assert policy.costs.draft_step == policy.costs.first_step == 0.005


def test_a_lasting_change_in_costs_does_switch_it_off():
    policy = trained(0.95, 0.005, {1: 0.020, 6: 0.030})
    assert length(policy, 10) > 0
    for _ in range(COST_WINDOW * 2):
        policy.observe_draft([0.05] * 1)  # the draft now costs more than the target
    lengths = [length(policy, 10) for _ in range(OFF_AFTER + 2)]
    assert lengths[-1] == 0


def test_a_dear_first_draft_step_makes_longer_drafts_pay():
    """The first step of a round runs on caches the target just flushed: a fixed cost per
    round, which longer drafts share out."""
    even = trained(0.95, 0.4, {1: 1.0, 2: 1.2, 6: 1.6})
    dear_first = trained(0.95, 0.4, {1: 1.0, 2: 1.2, 6: 1.6})
    for _ in range(COST_WINDOW):
        even.observe_draft([0.4, 0.4, 0.4])
        dear_first.observe_draft([1.0, 0.4, 0.4])
    assert dear_first.costs.first_step == 1.0 and dear_first.costs.draft_step == even.costs.draft_step == 0.4
    assert dear_first.best_draft().length > even.best_draft().length > 0


def test_draft_cut_ends_a_draft_where_a_rejection_becomes_likely():
    assert FixedDraftLength(6).plan_round(20).go_on is None  # a fixed length is the user's
    assert AutoDraftLength().plan_round(20).go_on is None    # nothing measured yet, so no floor
    policy = trained(0.97, 0.005, {1: 0.020, 4: 0.024, 12: 0.032})
    for _ in range(40):
        policy.confidence.observe(0.95, accepted=True)  # sure drafts always pass
        policy.confidence.observe(0.4, accepted=True)   # unsure ones pass two times in three
        policy.confidence.observe(0.4, accepted=True)
        policy.confidence.observe(0.4, accepted=False)
    assert policy.p_min == 0.0  # worth proposing: more often right than wrong ...
    plan = policy.plan_round(20)
    k, go_on = plan.length, plan.go_on
    assert k >= 6
    assert all(go_on(0.95) for _ in range(k))  # a run of sure tokens drafts the whole length
    assert not go_on(0.4)                       # ... but not worth drafting past
    go_on = policy.plan_round(20).go_on         # each round starts afresh
    assert go_on(0.95) and not go_on(0.4)
    assert policy.confidence.rates[-1] > 0.95 and policy.confidence.rates[5] == pytest.approx(2 / 3, abs=0.05)


def _fresh(draft_step: float, accept: int) -> AutoDraftLength:
    """A new policy (no history), costs measured, and the first rounds judged."""
    policy = AutoDraftLength()
    policy.observe_verify(1, 0.020)
    policy.observe_verify(5, 0.024)
    for _ in range(COST_WINDOW):
        policy.observe_draft([draft_step] * 4)
    return policy


def _rounds_until_off(policy: AutoDraftLength, accept: int, limit: int = 40) -> int:
    for i in range(limit):
        k = length(policy, 10)
        if k == 0:
            return i
        judged(policy, drafted=k, accepted=min(accept, k))
    return limit


def test_a_draft_that_clearly_does_not_pay_stops_before_the_warm_up_ends():
    """Drafts dearer than the target and mostly rejected: plain is clearly faster, so
    the verdict comes after half the warm-up."""
    from app.engine.speculation.draft_policy import CLEAR_WARMUP_ROUNDS

    clear = _rounds_until_off(_fresh(0.030, accept=0), accept=0)
    assert clear == CLEAR_WARMUP_ROUNDS + OFF_AFTER - 1 < WARMUP_ROUNDS + OFF_AFTER - 1
    paying = _rounds_until_off(_fresh(0.001, accept=4), accept=4)
    assert paying == 40  # speculation that pays is never switched off


def _band_record(policy: AutoDraftLength, prob: float, accepted: int, of: int) -> None:
    for i in range(of):
        policy.confidence.observe(prob, accepted=i < accepted)


def test_the_confidence_floor_is_where_a_draft_stops_paying_for_its_cost():
    """A band accepted about a third of the time: a cheap draft model's step (4% of the
    target's) still pays there, an MTP head's (30%) does not; an eighth: neither."""
    cheap, dear = AutoDraftLength(), AutoDraftLength()
    for policy, step in ((cheap, 0.001), (dear, 0.0075)):
        policy.observe_verify(1, 0.025)
        policy.observe_verify(2, 0.0285)
        policy.observe_draft([step])
        _band_record(policy, 0.015, 1, 20)    # below 0.02: 0.13 with the band's prior
        _band_record(policy, 0.08, 6, 20)     # 0.05 to 0.1: 0.35
        _band_record(policy, 0.5, 19, 20)
    assert cheap.p_min == CONFIDENCE_BANDS[0]   # (0.025 + 0.001 + 0.0035) / 0.025 - 1 = 0.18
    assert dear.p_min == CONFIDENCE_BANDS[2]    # 0.44: the 0.35 band does not pay


def test_sure_runs_draft_past_the_best_length_only_once_sureness_was_seen():
    """Where the most confident band was never judged (an MTP head seldom above 0.9),
    its prior must not stretch drafts past what the positions say pays."""
    def policy_with(sure_judged: int) -> AutoDraftLength:
        policy = trained(0.7, 0.0075, {1: 0.025, 2: 0.0285, 3: 0.030, 4: 0.033, 5: 0.036})
        _band_record(policy, 0.95, sure_judged, sure_judged)
        return policy
    unseen, seen = policy_with(0).best_draft(), policy_with(40).best_draft()
    assert unseen.length <= 2 < seen.length
