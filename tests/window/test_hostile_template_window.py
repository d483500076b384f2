"""A model whose chat template hangs or fails: the window still replies (ChatML, with a
notice naming the file), and Stop and closing the window end a render in progress."""

from __future__ import annotations

import time

import pytest

from app.session.chat_types import ChatPrompt, LoadInfo
from app.engine.prompting import template_limits
from app.engine.prompting.chat import conversation_prompt
from app.storage.settings import Settings
from app.ui.message_view import COMPLETE, STOPPED

from window_fixtures import REPLY_TIMEOUT_MS, wait_loaded
from bridge.fakes import ScriptedLoader, ScriptedModels, tokens

NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
SETTINGS = Settings(target_path="/models/hostile.gguf", draft_path="/models/scripted-draft.gguf")


class TextModel:
    """Just enough of a backend for prompts: characters as tokens, no control tokens."""

    n_ctx = 100_000
    bos_id = eos_id = -1
    add_bos = False
    name = "hostile"

    def __init__(self, template: str) -> None:
        self.chat_template = template
        self.path = "/models/hostile.gguf"

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return [ord(c) for c in text]

    def token_bytes(self, token_id: int) -> bytes:
        return chr(token_id).encode()

    def token_text(self, token_id: int) -> str:
        return chr(token_id)


class TemplateModels(ScriptedModels):
    """ScriptedModels whose prompt renders the model's template as the real models do."""

    def __init__(self, scripted: ScriptedModels, template: str) -> None:
        super().__init__(scripted.engine, LoadInfo(target_name="hostile.gguf", target_path="/models/hostile.gguf"))
        self.model = TextModel(template)

    def render(self, history, system_prompt: str, max_tokens: int) -> ChatPrompt:
        return ChatPrompt(*conversation_prompt(self.model, history, system_prompt, max_tokens))


@pytest.fixture
def hostile_window(make_window, qtbot):
    def make(template: str = NESTED_LOOPS):
        loader = ScriptedLoader(tokens("Hello", "!"))
        loader.models = TemplateModels(loader.models, template)
        window = make_window(SETTINGS, loader=loader)
        wait_loaded(qtbot, window)
        return window

    return make


def test_a_failing_template_still_gets_a_reply_and_says_why(hostile_window, qtbot):
    window = hostile_window("{{ 1/0 }}")
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        window.send("Hi")
    reply = blocker.args[0]
    assert reply.status == COMPLETE and reply.text() == "Hello!"
    notice = window.notices.notice("template")
    assert notice is not None
    assert notice.text().startswith("hostile.gguf: the chat template failed: ZeroDivisionError")
    assert "llama.cpp's 'chatml' format" in notice.text()


def test_a_hanging_template_ends_at_its_time_limit_and_the_reply_comes(hostile_window, qtbot):
    window = hostile_window()
    started = time.monotonic()
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        window.send("Hi")
    assert blocker.args[0].status == COMPLETE
    assert time.monotonic() - started < template_limits.RENDER_SECONDS + 8
    assert "ran longer than" in window.notices.notice("template").text()


def test_stop_ends_a_render_in_progress(hostile_window, qtbot, monkeypatch):
    monkeypatch.setattr(template_limits, "RENDER_SECONDS", 600.0)  # only Stop can end it now
    window = hostile_window()
    reply = window.send("Hi")
    qtbot.wait(300)  # the worker is inside the template by now
    assert window.client.busy
    stopped_at = time.monotonic()
    window.stop()
    qtbot.waitUntil(lambda: not window.client.busy, timeout=5000)
    assert time.monotonic() - stopped_at < 5
    assert reply.status == STOPPED
    # The engine thread is free again: the next message gets its reply (ChatML after the limit).
    monkeypatch.setattr(template_limits, "RENDER_SECONDS", 0.2)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        window.send("Again")
    assert blocker.args[0].status == COMPLETE


def test_closing_the_window_ends_a_render_in_progress(hostile_window, qtbot, monkeypatch):
    monkeypatch.setattr(template_limits, "RENDER_SECONDS", 600.0)
    window = hostile_window()
    window.send("Hi")
    qtbot.wait(300)
    link = window.client._link
    started = time.monotonic()
    window.close()  # joins the engine thread: returns only once the render has ended
    assert time.monotonic() - started < 5
    assert not link._engine.is_alive()
