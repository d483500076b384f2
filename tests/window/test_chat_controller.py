"""``ChatController`` on its own: the real engine client and host (on a thread), a scripted session,
the real chat view, stats panel and notices — no window around them."""

from __future__ import annotations

import pytest

from app.session.config import ModelSpec
from app.engine.types import StopReason
from app.errors import TandemError
from app.storage.settings import Settings
from app.ui.chat_view import ChatView
from app.ui.message_view import COMPLETE, FAILED, STOPPED
from app.ui.notices import NoticeArea
from app.ui.stats_panel import StatsPanel
from app.window.chat_controller import ChatController

from window_fixtures import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS
from bridge.fakes import ScriptedLoader, scripted_client, tokens

SETTINGS = Settings(target_path="/models/scripted.gguf", temperature=0.5, seed=3, max_tokens=7,
                    system_prompt="Be brief.")


@pytest.fixture
def chat(qtbot, qasync_loop):
    """(controller, loader, said): a loaded scripted engine behind a chat controller."""
    made = []

    def make(events=tokens("Hello", " there", "!"), *, delay=0.0, settings=SETTINGS):
        loader = ScriptedLoader(events, delay=delay)
        client = scripted_client(loader)
        view, stats, notices = ChatView(), StatsPanel(), NoticeArea()
        for widget in (view, stats, notices):
            qtbot.addWidget(widget)
        said: list[str] = []
        controller = ChatController(client, view, stats, notices, settings=lambda: settings,
                                    say=lambda text, _ms: said.append(text))
        client.load(ModelSpec.from_settings(settings))
        qtbot.waitUntil(lambda: client.info is not None, timeout=LOAD_TIMEOUT_MS)
        made.append(client)
        return controller, loader, said

    yield make
    for client in made:
        client.shutdown()


def test_a_sent_message_streams_into_its_reply_with_the_settings_in_force(chat, qtbot):
    controller, loader, _ = chat()
    seen = {"user": [], "started": [], "tokens": []}
    controller.user_message_added.connect(seen["user"].append)
    controller.reply_started.connect(seen["started"].append)
    controller.reply_tokens.connect(lambda reply, events: seen["tokens"].extend(events))
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as finished:
        reply = controller.send("  Hi  ")
        assert controller.busy
    assert finished.args == [reply] and seen["started"] == [reply]
    assert [m.text() for m in seen["user"]] == ["Hi"]
    assert reply.status == COMPLETE and reply.text() == "Hello there!"
    assert [e.text for e in seen["tokens"]] == ["Hello", " there", "!"]  # every batch, as shown
    assert reply.stats.tokens == 3 and reply.stats.stop_reason == StopReason.EOS
    assert controller.stats.speed_label.text() != "—"  # the side panel shows the figures
    sampling, spec, max_tokens = loader.engine.calls[-1]
    assert (sampling.temperature, sampling.seed, max_tokens) == (0.5, 3, 7)
    assert spec.enabled
    assert loader.models.histories[-1] == (("user", "Hi"),)


def test_nothing_is_sent_while_a_reply_runs_or_when_there_is_no_text(chat, qtbot):
    controller, loader, _ = chat(delay=0.05)
    assert controller.send("   ") is None
    first = controller.send("one")
    assert first is not None and controller.send("two") is None and controller.regenerate() is None
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        controller.stop()
    assert first.status == STOPPED and first.stats.stop_reason == StopReason.CANCELLED
    assert [m.text() for m in controller.chat_view.messages()] == ["one", first.text()]


def test_abandoning_a_reply_keeps_what_it_showed_and_ignores_its_late_tokens(chat, qtbot):
    controller, _, _ = chat(tokens(*[f"t{i} " for i in range(200)]), delay=0.02)
    finished = []
    controller.reply_finished.connect(finished.append)
    reply = controller.send("long")
    qtbot.waitUntil(lambda: len(reply.events) >= 2, timeout=REPLY_TIMEOUT_MS)
    controller.abandon()
    assert finished == [reply] and reply.status == STOPPED  # at once, not when the engine ends
    assert reply.stats is not None and reply.stats.stop_reason == StopReason.CANCELLED
    shown = reply.text()
    assert controller.streaming == []
    qtbot.waitUntil(lambda: not controller.busy, timeout=REPLY_TIMEOUT_MS)
    qtbot.wait(50)
    assert reply.text() == shown and finished == [reply]  # the engine's last word reached nothing


def test_a_reply_that_fails_before_any_text_is_failed(chat, qtbot):
    controller, loader, _ = chat(tokens("a"))
    loader.engine.error = TandemError("no room")
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as finished:
        controller.send("Hi")
    assert finished.args[0].status == FAILED and finished.args[0].text() == ""


def test_new_chat_clears_the_view_and_says_so(chat, qtbot):
    controller, _, _ = chat()
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        controller.send("Hi")
    with qtbot.waitSignal(controller.conversation_cleared):
        controller.new_chat()
    assert controller.chat_view.messages() == []


def test_regenerate_replaces_the_last_reply(chat, qtbot):
    controller, loader, _ = chat()
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as first:
        controller.send("Hi")
    old = first.args[0]
    with qtbot.waitSignal(controller.reply_removed) as removed, \
            qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as second:
        controller.regenerate()
    assert removed.args == [old] and second.args[0] is not old
    assert [m.role for m in controller.chat_view.messages()] == ["user", "assistant"]
    assert loader.models.histories[-1] == (("user", "Hi"),)  # the old reply is not sent


def test_regenerate_hands_the_old_reply_to_the_session_to_copy_from(chat, qtbot):
    """A session with copy sources (``ChatSession.remember``) is given the replaced reply,
    and the engine the session's sources; a first reply replaces nothing."""
    controller, loader, _ = chat()
    remembered = loader.models.remembered
    loader.models.copy_sources = "the session's sources"
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        controller.send("Hi")
    assert remembered == [] and loader.engine.copy_sources == ["the session's sources"]
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS):
        controller.regenerate()
    assert remembered == ["Hello there!"]
    assert loader.engine.copy_sources[-1] == "the session's sources"


def test_a_failed_reply_says_why_and_still_finishes(chat, qtbot):
    controller, loader, said = chat(tokens("a", "b", "c", "d"))
    loader.engine.error = TandemError("the model fell over")
    with qtbot.waitSignal(controller.reply_finished, timeout=REPLY_TIMEOUT_MS) as finished:
        controller.send("Hi")
    reply = finished.args[0]
    # It failed halfway: what was written stays, stopped, with the reason.
    assert reply.status == STOPPED and reply.text() == "ab" and "the model fell over" in reply.error
    assert any("the model fell over" in line for line in said)


def test_requests_it_did_not_start_are_not_its_business(chat, qtbot):
    controller, _, _ = chat()
    started = []
    controller.reply_started.connect(started.append)
    with qtbot.waitSignal(controller.client.finished, timeout=REPLY_TIMEOUT_MS):
        controller.client.generate([("user", "someone else's")], max_tokens=3)
    assert controller.chat_view.messages() == [] and started == []
