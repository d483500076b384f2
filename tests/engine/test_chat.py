"""Chat templates render in a sandbox; a hostile or broken template is a clear error."""

import pytest

from app.engine.chat import CHATML, build_messages, chat_tokens, fit_conversation, render_chat
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
