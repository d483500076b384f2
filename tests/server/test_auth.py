"""Safe by default: another host than loopback needs a key, and the key guards every route."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from .live_server import LiveServer, tandem

KEY = "test-key-5d1f"
ORIGIN = "https://editor.example"  # the one web origin the keyed server lets in (--cors-origin)


def test_a_non_local_bind_without_a_key_is_refused_in_one_line():
    result = tandem("serve", "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("tandem: error:") == 1 and "--api-key" in result.stderr
    assert "Loading" not in result.stderr  # refused before any model is read


@pytest.fixture(scope="module")
def keyed(demo_models):
    live = LiveServer("--host", "0.0.0.0", "--api-key", KEY, "--cors-origin", ORIGIN)
    live.url = live.url.replace("0.0.0.0", "127.0.0.1")
    yield live
    assert live.stop() == 0


def test_every_route_needs_the_key(keyed):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                             ("GET", "/no/such/route")):
            response = httpx.request(method, keyed.url + path, headers=headers, json={}, timeout=60)
            assert response.status_code == 401, (headers, path)
            assert response.json()["error"]["code"] == "invalid_api_key"


def test_the_openai_client_with_the_key_is_served(keyed):
    from openai import AuthenticationError, OpenAI

    client = OpenAI(base_url=keyed.base_url, api_key=KEY, max_retries=0, timeout=600)
    reply = client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert reply.usage.completion_tokens <= 2
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=keyed.base_url, api_key="wrong", max_retries=0).models.list()


def test_cors_lets_in_the_named_origin_only(keyed):
    """A browser's preflight (which carries no key) from the named origin is answered
    with it; another origin's is not; the named origin's keyed request carries it too."""
    def preflight(origin: str) -> httpx.Response:
        return httpx.options(keyed.url + "/v1/chat/completions", timeout=60, headers={
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})

    allowed = preflight(ORIGIN)
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    other = preflight("https://elsewhere.example")
    assert "access-control-allow-origin" not in other.headers
    models = httpx.get(keyed.url + "/v1/models", timeout=60,
                       headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"})
    assert models.status_code == 200 and models.headers["access-control-allow-origin"] == ORIGIN
    keyless = httpx.get(keyed.url + "/v1/models", timeout=60, headers={"Origin": ORIGIN})
    assert keyless.status_code == 401  # the origin is let in, the key is still needed


def test_ctrl_c_while_a_reply_streams_answers_it_and_stops_cleanly(keyed):
    """Last in this module: it stops the server."""
    lines: list[str] = []
    body = {"messages": [{"role": "user", "content": "Write a very long essay."}], "max_tokens": 1500,
            "ignore_eos": True, "stream": True}

    def stream() -> None:
        with httpx.stream("POST", keyed.base_url + "/chat/completions", json=body, timeout=600,
                          headers={"Authorization": f"Bearer {KEY}"}) as response:
            lines.extend(line for line in response.iter_lines() if line)

    reader = threading.Thread(target=stream)
    reader.start()
    deadline = time.monotonic() + 300
    while not any('"content": "' in line and '"content": ""' not in line for line in lines) \
            and reader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert keyed.stop() == 0
    reader.join(60)
    assert lines[-1] == "data: [DONE]"
    assert "server_shutting_down" in lines[-2] or '"finish_reason": "cancelled"' in lines[-2]
    log = "".join(keyed.stderr)
    assert "Traceback" not in log and "Exception in ASGI" not in log, log
