"""The auto draft policy's exact decisions on fixed synthetic traces.

``policy_trace.json`` was recorded from the single-class policy before it was
split into costs, acceptance and policy modules. Replaying the same costs and
accept/reject outcomes must give the same draft lengths, confidence floors and
cuts, round for round: the split is a refactor, not a retuning. If a change to
the policy is meant to change its decisions, re-record the file deliberately
(``python tests/engine/speculation/test_policy_trace.py``) and say so in the commit.

Two traces:
- ``policy``: the policy alone, fed costs and outcomes in the order the engine
  feeds them, through phases where drafting pays, stops paying (speculation
  switches off and probes) and pays again, with stalls and a shrinking room;
- ``engine``: the whole speculative loop on Markov models with a fake clock,
  so the loop's calls into the policy (what it learns from copies, cut drafts,
  dropped tokens, overhead) are pinned as well.
"""

from __future__ import annotations

import json
import random
import sys
import types
from pathlib import Path

import numpy as np

from app.engine.speculation import drafters

from app.engine.speculation import speculative
from app.engine.speculation.draft_policy import AutoDraftLength
from app.engine.speculation.draft import Draft
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, when run as a script too
from markov_backend import MarkovBackend  # noqa: E402

RECORDED = Path(__file__).with_name("policy_trace.json")
AUTO = SpecConfig(draft_max="auto")


def _draft_step_cost(round_index: int) -> float:
    """Cheap drafts, then (rounds 150-299) drafts dearer than the target, then cheap again."""
    return 0.06 if 150 <= round_index < 300 else 0.004


def policy_trace(rounds: int = 720) -> list[list]:
    """Per round: [length asked for, p_min, drafted, accepted, cut after]."""
    rng = random.Random(1234)  # Mersenne Twister: the same draws on every platform
    policy = AutoDraftLength()
    trace = []
    for r in range(rounds):
        limit = 20 if r < 680 else 700 - r  # the context filling up at the end
        step = _draft_step_cost(r)
        plan = policy.plan_round(limit)
        k, p_min, go_on = plan.length, plan.p_min, plan.go_on
        tokens: list[float] = []
        dropped = None
        for _ in range(k):
            prob = rng.random() ** 0.3  # mostly sure drafts, a tail of unsure ones
            if prob < p_min:
                dropped = prob
                break
            tokens.append(prob)
            if go_on is not None and not go_on(prob):
                break
        # A draft is accepted while each token passes, with a chance that grows with its
        # confidence (under 1/2 below 0.25, so the floor has something to learn).
        accepted = 0
        while accepted < len(tokens) and rng.random() < tokens[accepted] ** 0.5:
            accepted += 1
        stall = 8.0 if r % 37 == 5 else 1.0  # another program takes the CPU for a moment
        if tokens:
            policy.observe_draft([1.5 * step * stall] + [step * stall] * (len(tokens) - 1))
        policy.observe_verify(len(tokens) + 1, (0.02 + 0.002 * (len(tokens) + 1)) * stall)
        # Greedy: the target's next token judges a dropped draft token (right: token 7).
        right = dropped is not None and accepted == len(tokens) and rng.random() < dropped
        draft = Draft(tokens=list(range(len(tokens))), probs=tokens,
                      dropped=None if dropped is None else (7, dropped))
        policy.observe_round(draft, accepted, 7 if right else 8, greedy=True)
        if tokens:
            policy.observe_overhead(0.001 * stall)
        trace.append([k, p_min, len(tokens), accepted, go_on is not None])
    return trace


class _FakeClock:
    """Stands in for ``time`` in the engine's modules: only model calls take time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.target_calls = 0

    def perf_counter(self) -> float:
        return self.now


class _TimedMarkov(MarkovBackend):
    """A Markov model whose calls advance the fake clock by a batch-size cost."""

    def __init__(self, logits, clock: _FakeClock, is_target: bool) -> None:
        super().__init__(logits, n_ctx=4096)
        self.clock = clock
        self.is_target = is_target
        self.batches: list[int] = []  # the target's verification batch sizes, round by round

    def evaluate(self, tokens, logits_at):
        n = len(tokens)
        if self.is_target:
            self.clock.target_calls += 1
            if len(logits_at):
                self.batches.append(n)
            self.clock.now += 0.02 + 0.002 * n
        else:
            # The draft model gets dear for a stretch of the run, then cheap again.
            dear = 600 <= self.clock.target_calls < 900
            self.clock.now += (0.05 if dear else 0.003) + 0.0005 * n
        return super().evaluate(tokens, logits_at)

    def trim(self, n_keep: int) -> None:
        if self.is_target:
            self.clock.now += 0.0003  # the round's bookkeeping
        super().trim(n_keep)


class _RecordingDrafter(ModelDrafter):
    """Records what each proposal was asked for and what it gave. It drafts lines only
    (the trace was recorded without trees)."""

    branches = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[list] = []

    def propose(self, context, n_max, sampling, rng, p_min, go_on=None, **extra):
        draft = super().propose(context, n_max, sampling, rng, p_min, go_on, **extra)
        self.calls.append([n_max, p_min, go_on is not None, len(draft)])
        return draft


def engine_trace(monkeypatch) -> dict:
    clock = _FakeClock()
    fake_time = types.SimpleNamespace(perf_counter=clock.perf_counter, process_time=clock.perf_counter)
    monkeypatch.setattr(speculative, "time", fake_time)
    monkeypatch.setattr(drafters, "time", fake_time)
    rng = np.random.default_rng(11)
    vocab = 12
    target_logits = rng.normal(0, 2.5, (vocab, vocab))
    draft_logits = target_logits + rng.normal(0, 1.2, (vocab, vocab))
    drafter = _RecordingDrafter(_TimedMarkov(draft_logits, clock, False), vocab)
    target = _TimedMarkov(target_logits, clock, True)
    engine = SpeculativeEngine(target, drafter)
    replies = []
    # Several replies on one engine: what auto learned in one carries into the next.
    for seed, spec in enumerate([AUTO, AUTO, SpecConfig(draft_max="auto", copy_min=3),
                                 SpecConfig(draft_max="auto", p_min=0.3), AUTO]):
        generation = engine.generate([1, 2, 3], SamplingConfig(temperature=0.0 if seed % 2 == 0 else 0.8, seed=seed),
                                     spec, max_tokens=300)
        ids = [event.id for event in generation]
        stats = generation.stats
        replies.append({"ids": ids, "rounds": stats.rounds, "drafted": stats.drafted,
                        "accepted": stats.accepted, "copied": stats.copied})
    return {"replies": replies, "proposals": drafter.calls, "batches": target.batches}


def test_policy_decisions_match_the_recorded_trace():
    recorded = json.loads(RECORDED.read_text())["policy"]
    trace = policy_trace()
    # The trace must exercise every branch of the state machine to pin anything.
    lengths = [row[0] for row in trace]
    assert 0 in lengths and max(lengths) > 8, "speculation should switch off and back on"
    assert any(row[1] > 0 for row in trace), "a learned confidence floor"
    assert any(row[2] < row[0] for row in trace if row[0]), "drafts cut short"
    for r, (got, want) in enumerate(zip(trace, recorded)):
        assert got == want, f"round {r}: {got} != recorded {want}"
    assert len(trace) == len(recorded)


def test_engine_loop_decisions_match_the_recorded_trace(monkeypatch):
    recorded = json.loads(RECORDED.read_text())["engine"]
    trace = engine_trace(monkeypatch)
    proposals = trace["proposals"]
    assert any(call[0] == 0 for call in proposals) or len(proposals) < sum(r["rounds"] for r in trace["replies"]), \
        "some rounds should run plainly"
    for i, (got, want) in enumerate(zip(proposals, recorded["proposals"])):
        assert got == want, f"proposal {i}: {got} != recorded {want}"
    assert len(proposals) == len(recorded["proposals"])
    assert trace["batches"] == recorded["batches"]  # every round's draft length, plain ones too
    assert trace["replies"] == recorded["replies"]


if __name__ == "__main__":
    # Re-record (only when a change to the policy's decisions is intended).
    import pytest

    patcher = pytest.MonkeyPatch()
    try:
        data = {"policy": policy_trace(), "engine": engine_trace(patcher)}
    finally:
        patcher.undo()
    RECORDED.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"recorded {len(data['policy'])} policy rounds, {len(data['engine']['proposals'])} proposals")
