"""The window's Local server runs in its engine process: the API and the chat share one load
of the models and one queue, started and stopped by message; the dialog lists what was
served; and the server goes with an engine that dies."""

from __future__ import annotations

import os
import signal
import socket
import threading

import pytest

pytest.importorskip("PySide6")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_engine_process_serves_the_windows_models(qtbot, demo_models, monkeypatch, tmp_path):
    from openai import APIConnectionError, OpenAI
    from PySide6.QtWidgets import QWidget

    from app.bridge.engine_process import EngineProcessClient
    from app.session.config import ModelSpec
    from app.storage.settings import Settings
    from app.window.server_controller import ServerController

    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    client = EngineProcessClient()
    try:
        loads = []
        client.loaded.connect(loads.append)
        with qtbot.waitSignal(client.loaded, timeout=300_000):
            client.load(ModelSpec(target_path=str(demo_models.target), draft_path=str(demo_models.draft), n_ctx=1024))
        parent = QWidget()
        qtbot.addWidget(parent)
        controller = ServerController(client, lambda: Settings(), dialog_parent=parent)
        dialog = controller.open_dialog()
        dialog.switched.emit(True, free_port())
        url = controller.url
        assert url.startswith("http://127.0.0.1:") and dialog.address.text() == url

        api = OpenAI(base_url=url, api_key="local", max_retries=0, timeout=600)
        answers = []
        asking = threading.Thread(target=lambda: answers.append(api.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)))
        asking.start()
        qtbot.waitUntil(lambda: dialog.requests.topLevelItemCount() == 1, timeout=300_000)
        asking.join(60)
        assert answers and answers[0].model == client.info.target_name
        assert len(loads) == 1  # served with the models the window asked for, not a second load

        # The chat's reply and the API's share the engine's one queue: both are answered.
        with qtbot.waitSignal(client.finished, timeout=300_000):
            client.generate([("user", "Hi")], max_tokens=3)

        controller.stop()
        assert controller.url == ""
        with pytest.raises(APIConnectionError):
            api.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)

        # A server running when the engine dies goes with it, and the dialog says so.
        dialog.switched.emit(True, free_port())
        assert controller.url
        os.kill(client.pid, signal.SIGKILL)
        qtbot.waitUntil(lambda: client.death is not None, timeout=60_000)
        controller.engine_died()
        assert controller.url == "" and "stopped with the engine" in dialog.status.text()
    finally:
        client.shutdown()
