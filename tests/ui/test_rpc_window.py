"""The window with its target on a real ``tandem worker`` (127.0.0.1) that is killed in the
middle of a reply: ggml aborts the engine process, the window stays with the chat kept,
and the restart's load says in one line that the worker is gone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.backends import rpc
from app.ui.message_view import COMPLETE, INTERRUPTED

from .conftest import LOAD_TIMEOUT_MS, demo_settings, wait_loaded
from .engine_processes import needs_proc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rpc_workers import Worker, free_port  # noqa: E402

pytestmark = [needs_proc, pytest.mark.skipif(not rpc.available(), reason="this llama.cpp build has no RPC backend")]
REPLY_TIMEOUT_MS = 600_000  # a hang guard on a shared machine, not a speed limit


def test_a_worker_killed_mid_reply_leaves_the_window_and_the_chat(make_window, demo_models, qtbot):
    worker = Worker(free_port())
    try:
        worker.wait_ready()
        window = make_window(demo_settings(demo_models, rpc_workers=worker.endpoint, max_tokens=200, n_threads=1))
        wait_loaded(qtbot, window)
        assert window.client.info.workers == (worker.endpoint,)
        reply = window.send("Tell me a long story about a lighthouse keeper.")
        qtbot.waitUntil(lambda: len(reply.events) >= 4, timeout=REPLY_TIMEOUT_MS)
        worker.kill()
        # The engine's next step needs the worker: this reply's, or (had it just ended) the next one's.
        qtbot.waitUntil(lambda: reply.status in (INTERRUPTED, COMPLETE), timeout=REPLY_TIMEOUT_MS)
        replies = [reply]
        if window.client.death is None:
            replies.append(window.send("And then?"))
        qtbot.waitUntil(lambda: window.client.death is not None, timeout=REPLY_TIMEOUT_MS)

        line = window.client.death
        assert "\n" not in line and line.startswith("The engine crashed (SIGABRT") and "RPC" in line, line
        assert window.isVisible()
        assert replies[-1].status == INTERRUPTED and replies[0].text()  # what was shown stays
        assert [m.role for m in window.chat_view.messages()] == ["user", "assistant"] * len(replies)

        notice = window.notices.notice("engine")
        restart = next(b for b in notice.findChildren(type(notice.findChildren(object)[0])) if False) if False else None
        del restart
        from PySide6.QtWidgets import QPushButton

        next(b for b in notice.findChildren(QPushButton) if b.text() == "Restart engine").click()
        qtbot.waitUntil(lambda: window.notices.notice("load") is not None, timeout=LOAD_TIMEOUT_MS)
        said = window.notices.notice("load").text()
        assert f"worker {worker.endpoint} is not there (connection refused)" in said, said
        assert [m.role for m in window.chat_view.messages()] == ["user", "assistant"] * len(replies)
    finally:
        worker.kill()
