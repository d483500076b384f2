"""The API on a thread of its own, as a front end with its own main loop (the window)
runs it: served, then stopped with its thread ended; a taken port is one clear error."""

from __future__ import annotations

import pytest

from app.errors import TandemError


@pytest.fixture(scope="module")
def worker(demo_models):
    from app.server.worker import EngineWorker
    from app.session.config import ModelSpec
    from app.session.loading import load_session

    engine = EngineWorker(lambda: load_session(ModelSpec()))
    engine.start()
    yield engine
    engine.stop()


def test_served_on_a_thread_then_stopped(worker):
    from openai import OpenAI

    from app.server.api import create_app
    from app.server.listening import BackgroundServer
    from app.server.requests import Defaults

    served = []
    worker.listeners.append(served.append)
    server = BackgroundServer(create_app(worker, model_id="demo", defaults=Defaults()), worker)
    url = server.start("127.0.0.1", 0)
    try:
        client = OpenAI(base_url=url, api_key="local", max_retries=0, timeout=600)
        chunks = list(client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Hi"}],
                                                     max_tokens=3, stream=True))
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
        with pytest.raises(TandemError, match="Cannot listen on 127.0.0.1"):
            BackgroundServer(None, worker).start("127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0]))
    finally:
        server.stop()
    assert not server.running
    assert [r["kind"] for r in served] == ["chat"]  # a listener hears of each request served
