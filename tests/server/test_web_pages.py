"""No web page the user visits can drive the server: a foreign Host (DNS rebinding), a
foreign Origin (a cross-site "simple" POST, whatever its Content-Type) are refused before
any route runs; ordinary clients on 127.0.0.1, localhost and [::1] are served, their body
read as JSON whatever its Content-Type (as Ollama does).

Raw sockets send exactly the headers a browser would, byte for byte; the official
``openai`` client stands for a normal local program.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from .live_server import serving

OWN_NAME = "tandem-box.lan"  # named with --allowed-host
CHAT = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).encode()


@pytest.fixture(scope="module")
def live(demo_models):
    yield from serving("--allowed-host", OWN_NAME)


def port_of(live) -> int:
    return int(live.url.rsplit(":", 1)[1])


def raw(live, head: str, body: bytes = b"") -> tuple[int, dict]:
    """Send one HTTP/1.1 request as written (CRLFs added, Content-Length set) and read the
    status and the JSON body back."""
    lines = head.strip().splitlines() + [f"Content-Length: {len(body)}", "Connection: close"]
    request = ("\r\n".join(line.strip() for line in lines) + "\r\n\r\n").encode("latin-1") + body
    with socket.create_connection(("127.0.0.1", port_of(live)), timeout=600) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head_bytes, _, payload = answer.partition(b"\r\n\r\n")
    status = int(head_bytes.split(b" ", 2)[1])
    return status, json.loads(payload) if payload.strip() else {}


def browser_post(host: str, origin: str | None, content_type: str, path: str = "/v1/chat/completions") -> str:
    """A fetch() POST as Chromium sends it (mode no-cors, so no preflight)."""
    return f"""POST {path} HTTP/1.1
        Host: {host}
        User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36
        Accept: */*
        Accept-Language: en-US,en;q=0.9
        Content-Type: {content_type}
        {f"Origin: {origin}" if origin else "Sec-Fetch-User: ?1"}
        Sec-Fetch-Site: cross-site
        Sec-Fetch-Mode: no-cors
        Sec-Fetch-Dest: empty"""


def test_a_rebound_host_is_refused(live):
    """DNS rebinding: evil.example now resolves to 127.0.0.1, and the page is 'same-origin'
    with it, so the browser sends no foreign Origin at all; only Host gives it away."""
    port = port_of(live)
    status, body = raw(live, browser_post(f"evil.example:{port}", f"http://evil.example:{port}",
                                          "application/json"), CHAT)
    assert status == 403 and body["error"]["code"] == "forbidden_host"
    assert "evil.example" in body["error"]["message"] and "--allowed-host" in body["error"]["message"]
    status, body = raw(live, f"GET /v1/models HTTP/1.1\nHost: evil.example:{port}\nSec-Fetch-Site: same-origin")
    assert status == 403 and body["error"]["code"] == "forbidden_host"


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.evil.example", "localhost.evil.example",
                                  "tandem-box.lan.evil.example", "0x7f000001.example", "[::1].evil"])
def test_names_that_only_look_local_are_refused(live, host):
    status, body = raw(live, f"GET /health HTTP/1.1\nHost: {host}:{port_of(live)}")
    assert status == 403 and body["error"]["code"] == "forbidden_host"


def test_a_cross_site_simple_post_is_refused(live):
    """text/plain, so the browser sends it without a preflight and CORS never applies."""
    port = port_of(live)
    status, body = raw(live, browser_post(f"127.0.0.1:{port}", "http://evil.example", "text/plain;charset=UTF-8"),
                       CHAT)
    assert status == 403 and body["error"]["code"] == "forbidden_origin"
    assert "evil.example" in body["error"]["message"] and "--cors-origin" in body["error"]["message"]
    # The same page, even with the JSON content type (which would need a preflight):
    status, body = raw(live, browser_post(f"127.0.0.1:{port}", "https://evil.example", "application/json"), CHAT)
    assert status == 403 and body["error"]["code"] == "forbidden_origin"


@pytest.mark.parametrize("origin", ["null", "file://", "http://localhost.evil.example", "https://127.0.0.1:1"])
def test_other_origins_are_refused(live, origin):
    status, body = raw(live, browser_post(f"127.0.0.1:{port_of(live)}", origin, "application/json"), CHAT)
    assert status == 403 and body["error"]["code"] == "forbidden_origin"


NOT_JSON = ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x", None]


@pytest.mark.parametrize("content_type", NOT_JSON)
def test_a_post_without_origin_is_read_as_json_whatever_its_content_type(live, content_type):
    """curl -d (Ollama's examples) says x-www-form-urlencoded, litellm's Ollama provider
    says nothing: no web page sent it (browsers always send Origin with a POST)."""
    head = f"POST /v1/chat/completions HTTP/1.1\nHost: 127.0.0.1:{port_of(live)}"
    if content_type:
        head += f"\nContent-Type: {content_type}"
    status, body = raw(live, head, CHAT)
    assert status == 200 and body["object"] == "chat.completion"


@pytest.mark.parametrize("content_type", [*NOT_JSON, "application/json"])
@pytest.mark.parametrize("origin", ["http://evil.example", "null"])
def test_a_foreign_origin_is_refused_whatever_its_content_type(live, origin, content_type):
    head = browser_post(f"127.0.0.1:{port_of(live)}", origin, content_type or "")
    if content_type is None:
        head = "\n".join(line for line in head.splitlines() if "Content-Type" not in line)
    status, body = raw(live, head, CHAT)
    assert status == 403 and body["error"]["code"] == "forbidden_origin"


def test_a_cross_site_request_without_origin_is_refused(live):
    """Sec-Fetch-Site still tells a web page's request from a program's."""
    status, body = raw(live, browser_post(f"127.0.0.1:{port_of(live)}", None, "text/plain"), CHAT)
    assert status == 403 and body["error"]["code"] == "forbidden_origin"


def test_its_own_origin_is_served_whatever_its_content_type(live):
    port = port_of(live)
    status, body = raw(live, browser_post(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}", "text/plain"), CHAT)
    assert status == 200 and body["choices"]


def test_refusals_are_one_line_and_do_not_echo_control_characters(live):
    status, body = raw(live, f"GET /health HTTP/1.1\nHost: evil\x7f\x01.example:{port_of(live)}")
    message = body["error"]["message"]
    assert status == 403 and "\n" not in message and "\x7f" not in message and "\x01" not in message


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST.", "app.localhost", "[::1]", "127.8.9.10",
                                  OWN_NAME])
def test_local_names_and_the_allowed_host_are_served(live, host):
    port = port_of(live)
    status, body = raw(live, f"POST /v1/chat/completions HTTP/1.1\nHost: {host}:{port}\n"
                             "Content-Type: application/json; charset=utf-8", CHAT)
    assert status == 200 and body["object"] == "chat.completion"


def test_its_own_origin_is_served(live):
    port = port_of(live)
    status, body = raw(live, browser_post(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}", "application/json"),
                       CHAT)
    assert status == 200 and body["choices"]


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_the_openai_client_is_served_from_loopback_and_localhost(live, name):
    from openai import OpenAI

    url = live.base_url.replace("127.0.0.1", name)
    client = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
    reply = client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert reply.choices[0].message.content is not None
    assert httpx.get(url.removesuffix("/v1") + "/health", timeout=60).json()["status"] == "ok"
