"""The window's Local server speaks Ollama's API too: the official ``ollama`` client is
answered beside the window's engine (its host on a thread here), and its request is listed in the dialog."""

from __future__ import annotations

import socket
import threading

import pytest

pytest.importorskip("PySide6")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_window_serves_ollama_clients(qtbot, demo_models):
    from ollama import Client
    from PySide6.QtWidgets import QWidget

    from app.bridge.engine_process import EngineProcessClient
    from app.enginehost.thread_link import thread_link
    from app.session.config import ModelSpec
    from app.storage.settings import Settings
    from app.window.server_controller import ServerController

    client = EngineProcessClient(start_link=thread_link())
    try:
        with qtbot.waitSignal(client.loaded, timeout=300_000):
            client.load(ModelSpec())
        parent = QWidget()
        qtbot.addWidget(parent)
        controller = ServerController(client, lambda: Settings(), dialog_parent=parent, save=lambda _: None)
        dialog = controller.open_dialog()
        dialog.switched.emit(True, free_port())
        ollama = Client(host=controller.url.removesuffix("/v1"), timeout=600)
        name = client.info.target_name + ":latest"
        assert [m.model for m in ollama.list().models] == [name]

        answers = []
        asking = threading.Thread(target=lambda: answers.append(
            ollama.chat(name, [{"role": "user", "content": "Hi"}], options={"num_predict": 3})))
        asking.start()
        qtbot.waitUntil(lambda: dialog.requests.topLevelItemCount() == 1, timeout=300_000)
        asking.join(60)
        assert answers and answers[0].done and 1 <= answers[0].eval_count <= 3
        assert dialog.requests.topLevelItem(0).text(1) == "chat"
        controller.stop()
    finally:
        client.shutdown()
