"""Fixtures: one live server per test module (see ``live_server``) and an ``openai`` client."""

from __future__ import annotations

import pytest

from .live_server import LiveServer


@pytest.fixture(scope="module")
def server(demo_models):
    live = LiveServer()
    yield live
    code = live.stop()
    assert code == 0, live.stderr
    assert not any("Traceback" in line for line in live.stderr), "".join(live.stderr)


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)
