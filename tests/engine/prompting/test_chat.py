"""Chat templates render in a sandbox; a hostile or broken template is a clear error."""

import pytest

from app.engine.prompting.chat import CHATML, build_messages, chat_tokens, fit_conversation, render_chat
from app.engine.errors import ChatTemplateError


def test_model_template_renders_chatml(q41_target):
    assert "<|im_start|>" in q41_target.chat_template
    text = render_chat(q41_target.chat_template, build_messages([("user", "Hi")], "Be brief."))
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")
    tokens = chat_tokens(q41_target, build_messages([("user", "Hi")]))
    im_start = q41_target.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(im_start) == 1 and tokens.count(im_start[0]) >= 2  # special tokens parsed as such


def test_fallback_template_when_the_model_has_none():
    assert render_chat(None, build_messages([("user", "Hi")])) == render_chat(CHATML, build_messages([("user", "Hi")]))


def test_sandbox_blocks_attribute_escapes():
    hostile = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ChatTemplateError):
        render_chat(hostile, [])


def test_template_raise_exception_and_syntax_errors_are_clear():
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        render_chat("{{ raise_exception('roles must alternate') }}", [])
    with pytest.raises(ChatTemplateError, match="does not compile"):
        render_chat("{% for %}", [])


def test_a_long_conversation_leaves_out_its_oldest_exchanges(q41_target):
    def tokens_of(messages):
        return chat_tokens(q41_target, messages)

    history = []
    for i in range(8):
        history += [("user", f"Question {i}: tell me about topic number {i} in some detail, please."),
                    ("assistant", f"Answer {i}: topic {i} is a fine topic with a long and varied history.")]
    history.append(("user", "And the last question?"))
    full = tokens_of(build_messages(history, "Be brief."))

    assert fit_conversation(history, "Be brief.", tokens_of, len(full)) == (full, 0)

    tokens, left_out = fit_conversation(history, "Be brief.", tokens_of, len(full) // 2)
    assert len(tokens) <= len(full) // 2
    assert left_out > 0 and left_out % 2 == 0  # whole exchanges, so turns still alternate
    text = b"".join(q41_target.token_bytes(t) for t in tokens).decode("utf-8")
    assert "Be brief." in text and "And the last question?" in text
    assert "Question 0" not in text and "Question 7" in text


def test_when_even_the_newest_message_does_not_fit_everything_else_goes(q41_target):
    def tokens_of(messages):
        return chat_tokens(q41_target, messages)

    history = [("user", "Hi"), ("assistant", "Hello!"), ("user", "word " * 200)]
    tokens, left_out = fit_conversation(history, "", tokens_of, 50)
    assert left_out == 2 and len(tokens) > 50  # the engine then says the prompt is too long


def _fit_by_every_cut(history, system, tokens_of, budget):
    """The answer fit_conversation must give: the first cut, oldest first, that fits."""
    cuts = list(range(0, len(history) - 1, 2))
    if len(history) - 1 not in cuts:
        cuts.append(len(history) - 1)
    for cut in cuts:
        tokens = tokens_of(build_messages(history[cut:], system))
        if len(tokens) <= budget:
            return tokens, max(0, cut)
    return tokens_of(build_messages(history[cuts[-1]:], system)), cuts[-1]


class CountedTokens:
    """Stands for a template and tokenizer: a message's tokens are its words plus four of
    scaffolding; counts the renders asked for and the messages they held."""

    def __init__(self):
        self.renders = 0
        self.messages_rendered = 0

    def __call__(self, messages):
        self.renders += 1
        self.messages_rendered += len(messages)
        tokens = []
        for message in messages:
            tokens += [1, 2, 3] + [7] * len(message["content"].split()) + [4]
        return tokens


def test_fitting_finds_what_a_search_over_every_cut_finds():
    import random

    chooser = random.Random(28)
    for _ in range(400):
        length = chooser.randint(0, 30)
        history = [("user" if i % 2 == 0 else "assistant", "word " * chooser.randint(0, 12)) for i in range(length)]
        system = chooser.choice(["", "Be brief."])
        budget = chooser.randint(0, 200)
        assert fit_conversation(history, system, CountedTokens(), budget) == \
            _fit_by_every_cut(history, system, CountedTokens(), budget), (length, system, budget)


def test_fitting_a_huge_chat_renders_about_what_fits_not_all_of_it():
    """50,000 one-word messages (a `tandem serve` request took 54 s to start its reply):
    the renders hold a few times what fits, however long the chat, in a few dozen renders."""
    history = [("user" if i % 2 == 0 else "assistant", f"w{i}") for i in range(49_999)] + [("user", "last")]
    counted = CountedTokens()
    tokens, left_out = fit_conversation(history, "Be brief.", counted, 2048)
    kept = len(history) - left_out
    assert (tokens, left_out) == (counted(build_messages(history[left_out:], "Be brief.")), left_out)
    assert len(tokens) <= 2048 and 300 < kept < 500  # ~5 tokens a message, plus the system prompt
    assert counted.renders <= 40 and counted.messages_rendered < 20 * kept  # not ~15 renders of 50,000


def test_a_huge_chat_fits_the_real_models_context_without_a_hang(q41_target):
    """The real template and tokenizer on 50,000 one-word messages: a hang guard, generous
    for a loaded machine; the template must not run past its time limit (no ChatML notice)."""
    import time

    from app.engine.prompting.chat import conversation_prompt

    history = [("user" if i % 2 == 0 else "assistant", f"w{i}") for i in range(49_999)] + [("user", "last")]
    started = time.monotonic()
    prompt = conversation_prompt(q41_target, history, "", 64)
    assert time.monotonic() - started < 60  # a dozen renders of all of it took 26 s for 10,000 messages here
    assert prompt.notice == "" and 0 < prompt.left_out < len(history)
    assert len(prompt.tokens) <= q41_target.n_ctx - 64
    assert prompt.tokens == chat_tokens(q41_target, build_messages(history[prompt.left_out:]))
