"""The window with its target on a real ``tandem worker`` (127.0.0.1) that is killed in the
middle of a reply: ggml aborts the engine process, the window stays with the chat kept,
and the restart's load says in one line that the worker is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backends.llama import rpc
from app.ui.message_view import COMPLETE, INTERRUPTED

from window_fixtures import LOAD_TIMEOUT_MS, demo_settings, wait_loaded
from .engine_processes import needs_proc

from rpc_workers import Worker, free_port

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


def _block_count(path) -> int:
    from app.engine.gguf.header import scan_header

    _, found = scan_header(Path(path), lambda key: key.endswith(".block_count"))
    return int(next(value for key, value in found.items() if key.endswith(".block_count")))


def test_the_side_panel_says_where_a_split_targets_layers_are_and_its_time_per_round(make_window, demo_models, qtbot):
    from window_fixtures import send_and_wait

    first, second = Worker(free_port()), Worker(free_port())
    try:
        first.wait_ready()
        second.wait_ready()
        window = make_window(demo_settings(demo_models, rpc_workers=f"{first.endpoint},{second.endpoint}",
                                           tensor_split="2,1", n_threads=1))
        wait_loaded(qtbot, window)
        stats = window.side_panel.stats
        # llama.cpp's own rule, for the layer count read from the file: layer i of n goes to
        # the first device whose cumulative share passes i / (n + 1) (the output layer is n).
        n = _block_count(demo_models.target)
        on_first = sum(1 for i in range(n) if i / (n + 1) < 2 / 3)
        expected = f"{on_first} on {first.endpoint}, {n - on_first} on {second.endpoint}, 0 here"
        assert window.client.info.layers == ((first.endpoint, on_first), (second.endpoint, n - on_first), ("here", 0))
        assert stats.layers_label.text() == expected and stats.layers_label.isVisibleTo(window)
        send_and_wait(qtbot, window, "Hi")
        shown = stats.target_round_label.text()
        assert stats.target_round_label.isVisibleTo(window)
        # The network's share, from the hello's round trip to each worker before the load.
        rtt = window.client.info.worker_rtt
        assert len(rtt) == 2 and all(0 < seconds < 1 for seconds in rtt), rtt
        assert " ms, network ≈ " in shown and shown.endswith("%)") and int(shown.split()[0]) >= 0, shown
    finally:
        first.kill()
        second.kill()
