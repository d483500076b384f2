"""Local server from the window: requests served beside the window's engine (its host on a
thread here; in a process of its own in tests/server/test_window_server_engine.py) with the
models it loaded (one load), listed in the dialog as they are served."""

from __future__ import annotations

import socket
import threading

import pytest

pytest.importorskip("PySide6")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_window_serves_its_loaded_models_without_loading_again(qtbot, demo_models):
    from openai import OpenAI
    from PySide6.QtWidgets import QWidget

    from app.bridge.engine_process import EngineProcessClient
    from app.enginehost.host import load_models
    from app.enginehost.thread_link import thread_link
    from app.session.config import ModelSpec
    from app.storage.settings import Settings
    from app.window.server_controller import ServerController

    loads = []

    def counting_loader(spec, progress):
        loads.append(spec)
        return load_models(spec, progress)

    client = EngineProcessClient(start_link=thread_link(counting_loader))
    try:
        with qtbot.waitSignal(client.loaded, timeout=300_000):
            client.load(ModelSpec())
        parent = QWidget()
        qtbot.addWidget(parent)
        saved = []
        controller = ServerController(client, lambda: Settings(), dialog_parent=parent, save=saved.append)
        dialog = controller.open_dialog()
        assert not dialog.enabled.isChecked() and not dialog.copy_button.isEnabled()  # off by default
        assert dialog.port.value() == Settings().server_port
        port = free_port()
        dialog.switched.emit(True, port)  # the switch, as the dialog sends it
        url = controller.url
        assert url.endswith(f":{port}/v1") and dialog.address.text() == url and dialog.copy_button.isEnabled()
        assert saved == [{"server_port": port}]  # remembered for the next session ...
        again = ServerController(client, lambda: Settings(server_port=port), dialog_parent=parent)
        assert again.open_dialog().port.value() == port  # ... whose dialog offers it

        answers = []
        api = OpenAI(base_url=url, api_key="local", max_retries=0, timeout=600)
        asking = threading.Thread(target=lambda: answers.append(api.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)))
        asking.start()
        qtbot.waitUntil(lambda: dialog.requests.topLevelItemCount() == 1, timeout=300_000)
        asking.join(60)
        assert answers and answers[0].model == client.info.target_name
        assert dialog.requests.topLevelItem(0).text(1) == "chat"
        assert len(loads) == 1  # the server used the window's models
        # Web pages are kept out as from `tandem serve` (tests/server/test_web_pages.py).
        import httpx

        rebound = httpx.get(url + "/models", headers={"Host": f"evil.example:{port}"}, timeout=60)
        assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "forbidden_host"
        cross_site = httpx.post(url + "/chat/completions", content=b'{"messages": []}', timeout=60,
                                headers={"Origin": "http://evil.example", "Content-Type": "text/plain"})
        assert cross_site.status_code == 403 and cross_site.json()["error"]["code"] == "forbidden_origin"
        assert dialog.requests.topLevelItemCount() == 1  # neither reached the engine
        controller.stop()
        assert controller.url == ""
    finally:
        client.shutdown()
