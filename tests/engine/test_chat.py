"""Chat templates render in a sandbox; a hostile or broken template is a clear error."""

import pytest

from app.engine.chat import CHATML, build_messages, chat_tokens, render_chat
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
