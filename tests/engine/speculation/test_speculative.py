"""The speculative loop: distribution at temperature > 0, caches, cancellation, limits."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest
from scipy import stats as scistats

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.draft_policy import FixedDraftLength, RoundPlan
from app.engine.speculation.drafters import ModelDrafter
from app.engine.errors import ContextOverflowError
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig, TokenKind

from markov_backend import MarkovBackend


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class CutWhenUnsure(FixedDraftLength):
    """Ends every draft after a token the drafter gave under 0.4: where a draft ends
    then depends on what was drawn, the case a stopping rule could bias."""

    def plan_round(self, limit):
        return RoundPlan(super().plan_round(limit).length, go_on=lambda prob: prob >= 0.4)


@pytest.mark.parametrize("cut, copy_min", [(False, 0), (True, 0), (False, 1)],
                         ids=["whole drafts", "cut by confidence", "copying repeats"])
def test_joint_distribution_through_the_whole_loop(cut, copy_min):
    """Markov target and draft, temperature 1: 4-token sequences follow the target exactly
    (the first token from the prompt's logits, then a round of up to two guesses and its own)."""
    rng = np.random.default_rng(7)
    vocab = 5
    target_logits = rng.normal(0, 1.5, (vocab, vocab))
    draft_logits = target_logits + rng.normal(0, 1.0, (vocab, vocab))  # a decent, imperfect draft
    target, draft = MarkovBackend(target_logits), MarkovBackend(draft_logits)
    engine = SpeculativeEngine(target, ModelDrafter(draft, vocab))
    policy = CutWhenUnsure(3) if cut else None  # None: the engine's own, for draft_max=3
    n = 20_000
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = accepted = copied = 0
    # Markov: only the last token matters. Copying, the prompt holds every token followed
    # by another: every second round copies (a one-hot proposal, judged by the same rule).
    prompt = [3, 4, 1, 2, 0, 1] if copy_min else [0, 1]
    for seed in range(n):
        generation = engine.generate(prompt, SamplingConfig(temperature=1.0, seed=seed),
                                     SpecConfig(draft_max=3, copy_min=copy_min), max_tokens=4, policy=policy)
        counts[tuple(e.id for e in generation)] += 1
        drafted += generation.stats.drafted
        accepted += generation.stats.accepted
        copied += generation.stats.copied
    p = _softmax(target_logits)
    sequences = [(a, b, c, d) for a in range(vocab) for b in range(vocab) for c in range(vocab) for d in range(vocab)]
    exact = np.array([p[1, a] * p[a, b] * p[b, c] * p[c, d] for a, b, c, d in sequences])
    observed = np.array([counts[s] for s in sequences])
    assert observed.sum() == n
    keep = exact * n >= 5  # chi-square needs expected counts of at least ~5
    expected = np.append(exact[keep], exact[~keep].sum()) * n
    got = np.append(observed[keep], observed[~keep].sum())
    assert scistats.chisquare(got, expected).pvalue > 1e-3
    # Total variation over the first three tokens (125 cells: 625 would be mostly noise at n).
    assert 0.5 * np.abs((observed - exact * n).reshape(-1, vocab).sum(axis=1)).sum() / n < 0.03
    assert 0.2 < accepted / drafted < 0.95  # both accept and reject paths ran
    # Every second round drafts two tokens (room for three) unless the cut ends it early.
    assert (drafted < 2 * n) == cut
    assert (copied >= n) == (copy_min > 0)


def test_temperature_one_first_tokens_match_plain(q41_target, q40_draft):
    """Real models, temperature 1: the first two tokens' distribution is the same with and
    without speculation (two-sample chi-square)."""
    tokens = chat_tokens(q41_target, build_messages([("user", "Name one fruit. Answer in one word.")]))
    sampling = dict(temperature=1.0, top_k=40)
    drafter = ModelDrafter(q40_draft, q41_target.n_vocab)
    plain_engine = SpeculativeEngine(q41_target)
    spec_engine = SpeculativeEngine(q41_target, drafter)
    n = 300
    plain, spec = Counter(), Counter()
    for seed in range(n):
        g = plain_engine.generate(tokens, SamplingConfig(seed=seed, **sampling), SpecConfig(enabled=False), 2)
        plain[tuple(e.id for e in g)] += 1
        g = spec_engine.generate(tokens, SamplingConfig(seed=10_000 + seed, **sampling), SpecConfig(draft_max=4), 3)
        spec[tuple(e.id for e in g)[:2]] += 1
    frequent = [k for k in set(plain) | set(spec) if plain[k] + spec[k] >= 10]
    table = np.array([[plain[k] for k in frequent] + [n - sum(plain[k] for k in frequent)],
                      [spec[k] for k in frequent] + [n - sum(spec[k] for k in frequent)]])
    table = table[:, table.sum(axis=0) > 0]
    assert table.shape[1] >= 3, "the prompt should give a spread of answers"
    assert scistats.chi2_contingency(table).pvalue > 1e-3


def test_utf8_split_across_tokens_is_identical_with_and_without_speculation(q41_target, q40_draft):
    text = "Tokyo 東京 means eastern capital 🌅🗼 — 你好，世界！"
    ids = q41_target.tokenize(text, add_special=False, parse_special=False)
    # The tokenizer splits some of these characters over several byte tokens.
    assert any(not q41_target.token_bytes(t).decode("utf-8", errors="ignore") for t in ids)
    prompt = q41_target.tokenize("Repeat after me: " + text + "\n" + text + "\n" + text,
                                 add_special=True, parse_special=False)
    greedy = SamplingConfig(ignore_eos=True)
    plain = SpeculativeEngine(q41_target).generate(prompt, greedy, SpecConfig(enabled=False), 48).run()
    spec = SpeculativeEngine(q41_target, ModelDrafter(q40_draft, q41_target.n_vocab)).generate(
        prompt, greedy, SpecConfig(draft_max=4), 48).run()
    plain_text = "".join(e.text for e in plain)
    assert [e.id for e in plain] == [e.id for e in spec]
    assert plain_text == "".join(e.text for e in spec)
    raw = b"".join(q41_target.token_bytes(e.id) for e in plain)
    # Every byte is in the text: a character the length limit cut short ends it as U+FFFD
    # (the reply's last token carries it), and no character inside the reply is broken.
    assert plain_text == raw.decode("utf-8", errors="replace")
    assert any(ord(c) > 0x2E80 for c in plain_text), plain_text  # the model did echo CJK/emoji
    assert "\ufffd" not in plain_text.rstrip("\ufffd")


def test_model_drafter_asks_after_each_token_whether_to_go_on(f32_target, q41_draft):
    drafter = ModelDrafter(q41_draft, f32_target.n_vocab)
    context = chat_tokens(f32_target, build_messages([("user", "Count from one to twenty.")]))
    drafter.prepare(context)
    asked: list[float] = []
    draft = drafter.propose(context, 8, SamplingConfig(), np.random.default_rng(0), 0.0,
                            lambda prob: asked.append(prob) or len(asked) < 3)
    assert len(draft) == 3 and asked == draft.probs
    whole = drafter.propose(context, 8, SamplingConfig(), np.random.default_rng(0), 0.0)
    assert len(whole) == 8 and whole.tokens[:3] == draft.tokens


def test_a_drafted_end_of_generation_ends_the_draft():
    table = np.full((5, 5), -5.0)
    table[np.arange(5), (np.arange(5) + 1) % 5] = 5.0  # each token is surely followed by the next
    draft = MarkovBackend(table)
    drafter = ModelDrafter(draft, 5, eog_ids=[3])
    proposal = drafter.propose([0, 1], 4, SamplingConfig(), np.random.default_rng(0), 0.0)
    assert proposal.tokens == [2, 3]  # nothing after the end: it could only be wasted
    assert ModelDrafter(MarkovBackend(table), 5).propose(
        [0, 1], 4, SamplingConfig(), np.random.default_rng(0), 0.0).tokens == [2, 3, 4, 0]


def test_second_turn_evaluates_only_the_new_suffix(f32_target, q41_draft):
    f32_target.trim(0)  # the session-wide models may hold this prompt from another test
    q41_draft.trim(0)
    engine = SpeculativeEngine(f32_target, ModelDrafter(q41_draft, f32_target.n_vocab))
    history = [("user", "Give me a name for a cat.")]
    first_tokens = chat_tokens(f32_target, build_messages(history))
    first = engine.generate(first_tokens, SamplingConfig(), SpecConfig(draft_max=4), 24)
    reply = "".join(e.text for e in first)
    history += [("assistant", reply), ("user", "And one for a dog?")]
    second_tokens = chat_tokens(f32_target, build_messages(history))
    second = engine.generate(second_tokens, SamplingConfig(), SpecConfig(draft_max=4), 8)
    second.run()
    assert first.stats.prompt_eval_tokens == len(first_tokens)
    new_suffix = len(second_tokens) - len(first_tokens) - first.stats.tokens
    assert second.stats.prompt_eval_tokens <= new_suffix + 4
    # The draft model reused its cache too: it holds the second prompt's prefix.
    assert q41_draft.tokens[: len(first_tokens)] == first_tokens


def test_cancel_from_another_thread_stops_within_one_round(f32_target, q41_draft):
    engine = SpeculativeEngine(f32_target, ModelDrafter(q41_draft, f32_target.n_vocab))
    tokens = chat_tokens(f32_target, build_messages([("user", "Write a long essay about rivers.")]))
    cancel = threading.Event()
    first_token = threading.Event()
    events_after_cancel = []
    generation = engine.generate(tokens, SamplingConfig(ignore_eos=True), SpecConfig(draft_max=5), 500, cancel)

    def consume():
        for event in generation:
            if cancel.is_set():
                events_after_cancel.append(event)
            first_token.set()

    worker = threading.Thread(target=consume)
    worker.start()
    assert first_token.wait(30)
    cancel.set()
    worker.join(30)
    assert not worker.is_alive()
    assert generation.stats.stop_reason == "cancelled"
    assert len(events_after_cancel) <= 6  # at most the rest of one round (draft_max + 1)
    assert generation.stats.tokens < 500


def test_context_full_stops_cleanly(demo_models):
    from app.backends.llama.backend import LlamaBackend

    small_target = LlamaBackend(demo_models.draft, n_ctx=96)
    small_draft = LlamaBackend(demo_models.strict_draft, n_ctx=96)
    try:
        engine = SpeculativeEngine(small_target, ModelDrafter(small_draft, small_target.n_vocab))
        tokens = chat_tokens(small_target, build_messages([("user", "Tell me a story.")]))
        generation = engine.generate(tokens, SamplingConfig(ignore_eos=True), SpecConfig(draft_max=8), 500)
        events = generation.run()
        assert generation.stats.stop_reason == "context_full"
        n_ctx = small_target.n_ctx  # llama.cpp rounds the size up (to 256 here)
        assert len(tokens) + len(events) == n_ctx
        with pytest.raises(ContextOverflowError, match=f"context holds {n_ctx}"):
            engine.generate(list(range(n_ctx + 4)), SamplingConfig(), SpecConfig(), 10)
    finally:
        small_draft.close()
        small_target.close()


def test_eos_stops_unless_ignored(q41_target, q40_draft):
    engine = SpeculativeEngine(q41_target, ModelDrafter(q40_draft, q41_target.n_vocab))
    tokens = chat_tokens(q41_target, build_messages([("user", "Say just the word yes.")]))
    stopped = engine.generate(tokens, SamplingConfig(), SpecConfig(draft_max=4), 200)
    events = stopped.run()
    assert stopped.stats.stop_reason == "eos"
    assert len(events) < 200
    assert all(e.id not in q41_target.eog_ids for e in events)
    ignored = engine.generate(tokens, SamplingConfig(ignore_eos=True), SpecConfig(draft_max=4), 60)
    assert len(ignored.run()) == 60


def test_kinds_and_corrections_carry_the_draft_proposal(q41_target, q40_draft):
    engine = SpeculativeEngine(q41_target, ModelDrafter(q40_draft, q41_target.n_vocab))
    tokens = chat_tokens(q41_target, build_messages([("user", "Explain photosynthesis.")]))
    events = engine.generate(tokens, SamplingConfig(ignore_eos=True), SpecConfig(draft_max=4), 96).run()
    kinds = Counter(e.kind for e in events)
    assert kinds[TokenKind.ACCEPTED] and kinds[TokenKind.CORRECTED] and kinds[TokenKind.BONUS]
    for e in events:
        if e.kind is TokenKind.CORRECTED:
            assert e.draft_id is not None and e.draft_id != e.id
            assert 0.0 < e.draft_prob <= 1.0 and e.draft_text is not None
    plain = SpeculativeEngine(q41_target).generate(tokens, SamplingConfig(ignore_eos=True),
                                                    SpecConfig(enabled=False), 8).run()
    assert {e.kind for e in plain} == {TokenKind.PLAIN}
