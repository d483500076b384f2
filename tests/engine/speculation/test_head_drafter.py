"""Drafting with the target's own MTP head (``HeadDrafter`` over ``MtpHead``), on tiny
random-weight models whose head agrees with the trunk part of the time
(``recurrent_models.MTP_SHAPE``): a hybrid (qwen35: chains, rollback by the exact trim)
and an attention model (glm4moe: trees too)."""

from __future__ import annotations

import pytest

from app.backends.llama.backend import LlamaBackend
from app.engine.speculation.drafters import HeadDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig

from head_checks import (corrected_tokens_carry_proposals, greedy_over_turns, ids, long_prompt,
                         sampled_first_token)
from recurrent_models import MTP_ARCHITECTURES


def _open(path, **kw) -> LlamaBackend:
    # One thread: llama.cpp's CPU results then depend on nothing but the batch.
    return LlamaBackend(path, n_ctx=1024, n_threads=1, **kw)


@pytest.fixture(scope="module", params=MTP_ARCHITECTURES)
def engines(request, mtp_models):
    target = _open(mtp_models[request.param], load_mtp=True)
    plain = _open(mtp_models[request.param])
    head = target.mtp_head()
    spec = SpeculativeEngine(target, HeadDrafter(head, target.n_vocab, eog_ids=target.eog_ids))
    yield request.param, spec, SpeculativeEngine(plain), head
    target.close()
    plain.close()


@pytest.mark.parametrize("draft_max", [4, "auto"])
def test_greedy_equals_the_target_alone_over_turns_and_a_regenerate(engines, draft_max):
    arch, spec, plain, head = engines
    drafted, accepted = greedy_over_turns(spec, plain, draft_max, DrafterKind.MTP.value, arch)
    if draft_max != "auto":  # (auto may stop drafting where the head does not pay)
        # The head agreed with the target part of the time: both accept and reject paths ran.
        assert drafted > 30 and 0.05 < accepted / drafted < 0.95
    assert head.blind_steps == 0  # every position read a row: the target's, or the head's own


def test_a_prompt_longer_than_a_batch_is_read_by_the_head_in_batches(engines):
    # The head catches up on the whole prompt at once; llama.cpp's batch holds n_batch
    # tokens (a 700-token prompt once stopped a benchmark with "refused token 512").
    arch, spec, plain, head = engines
    assert long_prompt(spec, plain) > 0, arch


def test_corrected_tokens_carry_what_the_head_proposed(engines):
    arch, spec, plain, head = engines
    corrected_tokens_carry_proposals(spec)


def test_sampled_tokens_follow_the_target_not_the_head(engines):
    """Rejection sampling with the head's warped logits as q: the first token of a reply
    is distributed as the target's own (chi-square), and not as the head's proposals."""
    arch, spec, plain, head = engines
    target_p, head_p, support = sampled_first_token(spec, plain)
    assert support >= 3, "the prompt should give a spread of tokens"
    assert target_p > 1e-3
    assert head_p < 1e-6


def test_a_tree_round_keeps_the_head_in_step(mtp_models):
    """On attention the round may be a token tree (second candidates where the head is
    unsure); the kept branch's rows reach the head like a line's."""
    target = _open(mtp_models["glm4moe"], load_mtp=True)
    plain = _open(mtp_models["glm4moe"])
    try:
        head = target.mtp_head()
        spec = SpeculativeEngine(target, HeadDrafter(head, target.n_vocab, eog_ids=target.eog_ids))
        prompt = target.tokenize("A list of animals:", add_special=True, parse_special=False)
        g = spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=4, tree="on"), max_tokens=48)
        assert ids(g) == ids(SpeculativeEngine(plain).generate(prompt, SamplingConfig(), SpecConfig(enabled=False),
                                                                  max_tokens=48))
        assert g.stats.tree_rounds > 0
        assert head.blind_steps == 0
    finally:
        target.close()
        plain.close()


def test_a_model_loaded_without_its_head_refuses_one_in_a_line(mtp_models):
    target = _open(mtp_models["qwen35"])  # load_mtp off: llama.cpp would abort making a head context
    try:
        with pytest.raises(Exception, match="loaded without MTP layers"):
            target.mtp_head()
    finally:
        target.close()
