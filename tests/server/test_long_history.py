"""A chat of 50,000 short messages against a live ``tandem serve``: answered (trimmed
to the context, its earliest messages left out), and a second client, arriving while
it is being served, is answered too (between two pieces of the long prompt's reading,
``app/server/interleave.py``, or before it when it overtakes its checking). The context
is 1024 tokens to keep the test short on a shared CPU; only generous hang guards, no
timing asserts (tests/README.md)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from .live_server import serving

N = 50_000


@pytest.fixture(scope="module")
def live(demo_models):
    yield from serving("--n-ctx", "1024", "--temperature", "0")


def test_fifty_thousand_messages_are_answered_and_another_client_is_served_meanwhile(live):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(N)]
    answers: dict = {}

    def long_one() -> None:
        answers["long"] = httpx.post(live.base_url + "/chat/completions", timeout=900,
                                     json={"messages": messages, "max_tokens": 4})

    thread = threading.Thread(target=long_one)
    thread.start()
    time.sleep(0.5)  # the long request is on its way
    health = httpx.get(live.url + "/health", timeout=120)
    assert health.status_code == 200
    other = httpx.post(live.base_url + "/chat/completions", timeout=900,
                       json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert other.status_code == 200 and other.json()["choices"][0]["message"]["content"] is not None
    thread.join(900)
    assert not thread.is_alive()
    long = answers["long"]
    assert long.status_code == 200, long.text
    body = long.json()
    assert body["tandem"]["left_out_messages"] > N - 1000
    assert body["usage"]["prompt_tokens"] <= 1024
    records = httpx.get(live.url + "/tandem/requests", timeout=120).json()["data"]
    assert {r["id"] for r in records} >= {body["id"], other.json()["id"]}
