"""Ollama's own documented curl examples (docs/api.md of ollama/ollama), sent verbatim
-- only the port differs -- to a live ``tandem serve``: ``curl -d`` labels its body
``application/x-www-form-urlencoded``, and litellm's Ollama provider sends no
Content-Type at all. The server answers them as Ollama does; a web page's request
(with a foreign ``Origin``) is still refused whatever its Content-Type.

The server is started with no alias for the examples' model (``llama3.2``: any name is
served, and the reply names the model that answered) and ``--max-tokens 8`` (the examples set no length; the demo pair runs on a shared CPU).
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from .live_server import serving

# The examples as written in Ollama's API reference (model llama3.2, port 11434).
GENERATE = '''{
  "model": "llama3.2",
  "prompt": "Why is the sky blue?"
}'''
CHAT = '''{
  "model": "llama3.2",
  "messages": [
    {
      "role": "user",
      "content": "why is the sky blue?"
    }
  ]
}'''
SHOW = '''{
  "model": "llama3.2"
}'''
GENERATE_WHOLE = '''{
  "model": "llama3.2",
  "prompt": "Why is the sky blue?",
  "stream": false
}'''


@pytest.fixture(scope="module")
def live(demo_models):
    yield from serving("--max-tokens", "8")


def curl(live, path: str, body: str | None = None) -> str:
    """``curl http://localhost:PORT/path [-d 'body']`` exactly as the docs write it."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    url = live.url.replace("127.0.0.1", "localhost") + path
    command = ["curl", "-s", url] + (["-d", body] if body is not None else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ndjson(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_generate_as_documented_streams_an_answer(live):
    lines = ndjson(curl(live, "/api/generate", GENERATE))
    assert lines[-1]["done"] is True and lines[-1]["model"] == "SmolLM2-135M-Instruct.F32.gguf:latest"
    assert "".join(line["response"] for line in lines).strip()
    assert 1 <= lines[-1]["eval_count"] <= 8


def test_generate_without_streaming(live):
    whole = json.loads(curl(live, "/api/generate", GENERATE_WHOLE))
    assert whole["done"] is True and whole["response"].strip()


def test_chat_as_documented_streams_an_answer(live):
    lines = ndjson(curl(live, "/api/chat", CHAT))
    assert lines[-1]["done"] is True
    assert all(line["message"]["role"] == "assistant" for line in lines)
    assert "".join(line["message"]["content"] for line in lines).strip()


def test_show_tags_ps_and_version_as_documented(live):
    shown = json.loads(curl(live, "/api/show", SHOW))
    assert shown["details"]["family"] == "llama" and "template" in shown
    tags = json.loads(curl(live, "/api/tags"))
    ps = json.loads(curl(live, "/api/ps"))
    assert len(tags["models"]) == 1 and len(ps["models"]) == 1
    assert json.loads(curl(live, "/api/version"))["version"].count(".") == 2


def test_urllib_as_it_comes_is_answered(live):
    """urllib labels a POST x-www-form-urlencoded by itself."""
    request = urllib.request.Request(live.url + "/api/generate", data=GENERATE_WHOLE.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=600) as response:
        assert json.loads(response.read())["response"].strip()


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_no_json_content_type_is_answered(live, content_type):
    """As litellm's Ollama provider sends it (no Content-Type), and the other labels."""
    body = CHAT.replace("}\n  ]", '}\n  ], "stream": false').encode()
    connection = http.client.HTTPConnection("127.0.0.1", int(live.url.rsplit(":", 1)[1]), timeout=600)
    connection.putrequest("POST", "/api/chat", skip_accept_encoding=True)
    if content_type:
        connection.putheader("Content-Type", content_type)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    answer = json.loads(response.read())
    connection.close()
    assert response.status == 200, answer
    assert answer["done"] is True and answer["message"]["content"].strip()


@pytest.mark.parametrize("origin", ["http://evil.example", "null"])
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/json"])
def test_a_web_page_still_cannot_post(live, origin, content_type):
    headers = {"Origin": origin} | ({"Content-Type": content_type} if content_type else {})
    request = urllib.request.Request(live.url + "/api/generate", data=GENERATE.encode(), headers=headers,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=600)
    assert refused.value.code == 403
    assert "--cors-origin" in json.loads(refused.value.read())["error"]["message"]
