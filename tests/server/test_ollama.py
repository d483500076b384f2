"""The official ``ollama`` client against a live ``tandem serve`` on the demo pair:
Ollama's routes beside OpenAI's, the same engine and queue behind both.

Short replies (a few tokens) throughout: the models run on a slow, shared CPU.
"""

from __future__ import annotations

import json

import httpx
import pytest
from ollama import Client


MODEL = "SmolLM2-135M-Instruct.F32.gguf"
NAME = MODEL + ":latest"
QUESTION = "Name three colours of the rainbow."


@pytest.fixture(scope="module")
def ollama(server):
    return Client(host=server.url, timeout=600)


def openai_chat(server, text: str, **fields) -> dict:
    body = {"messages": [{"role": "user", "content": text}], "temperature": 0, **fields}
    response = httpx.post(server.base_url + "/chat/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return response.json()


def test_ollama_is_running_and_its_version(server):
    root = httpx.get(server.url + "/")
    assert root.status_code == 200 and root.text == "Ollama is running"
    assert httpx.head(server.url + "/").status_code == 200
    version = httpx.get(server.url + "/api/version").json()
    assert version["version"].count(".") == 2 and version["tandem"]


def test_the_loaded_pair_is_listed_shown_and_running(ollama):
    listed = ollama.list().models
    assert [m.model for m in listed] == [NAME]
    details = listed[0].details
    assert details.format == "gguf" and details.family == "llama"
    assert details.parameter_size == "135M" and details.quantization_level == "F32"
    assert listed[0].size > 100_000_000 and len(listed[0].digest) == 64
    shown = ollama.show(NAME)
    assert shown.details.family == "llama" and shown.capabilities == ["completion"]
    assert shown.modelinfo["general.architecture"] == "llama"
    assert shown.modelinfo["general.parameter_count"] > 100_000_000
    assert "im_start" in shown.template  # the model's own (Jinja) chat template
    assert ollama.show(MODEL).details == shown.details  # the tag is optional
    running = ollama.ps().models
    assert [m.name for m in running] == [NAME] and running[0].context_length == 4096
    assert running[0].size_vram == 0  # a CPU machine


def test_any_model_name_is_served_and_the_reply_names_the_model_that_answered(ollama):
    """As on the OpenAI routes: a client's configured name (litellm's ``ollama/tandem``,
    an example's ``llama3.2``) works without --model-alias."""
    assert ollama.show("llama3.2").details == ollama.show(NAME).details
    for name in ("tandem", "llama3.2", "Some/Other:7b"):
        response = ollama.chat(name, [{"role": "user", "content": "hi"}], options={"temperature": 0, "num_predict": 2})
        assert response.model == NAME and response.done
    reply = ollama.generate("tandem", "One, two,", options={"temperature": 0, "num_predict": 2})
    assert reply.model == NAME


def test_chat_is_the_reply_the_openai_route_writes(server, ollama):
    expected = openai_chat(server, QUESTION, max_tokens=12)
    response = ollama.chat(NAME, [{"role": "user", "content": QUESTION}],
                           options={"temperature": 0, "num_predict": 12})
    assert response.message.role == "assistant"
    assert response.message.content == expected["choices"][0]["message"]["content"]
    assert response.done and response.done_reason == expected["choices"][0]["finish_reason"]
    assert response.eval_count == expected["usage"]["completion_tokens"] <= 12
    assert response.prompt_eval_count == expected["usage"]["prompt_tokens"]
    assert response.model == NAME
    durations = (response.prompt_eval_duration, response.eval_duration)
    assert all(isinstance(d, int) and d > 0 for d in durations)
    assert response.total_duration >= sum(durations)


def test_streamed_chat_equals_the_whole_reply(ollama):
    messages = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": QUESTION}]
    options = {"temperature": 0, "num_predict": 10}
    whole = ollama.chat(MODEL, messages, options=options)
    parts = list(ollama.chat(MODEL, messages, options=options, stream=True))
    assert parts and all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].message.content == "" and parts[-1].eval_count == whole.eval_count
    assert parts[-1].done_reason == whole.done_reason


def test_stream_is_the_default_as_in_ollama(server):
    body = {"model": NAME, "messages": [{"role": "user", "content": QUESTION}],
            "options": {"temperature": 0, "num_predict": 4}, "tandem": {"token_kinds": True}}
    with httpx.stream("POST", server.url + "/api/chat", json=body, timeout=600) as response:
        assert response.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert lines[-1]["done"] is True and len(lines) >= 2
    kinds = [k for line in lines[:-1] for k in line["tandem"]["token_kinds"]]
    assert len(kinds) == lines[-1]["eval_count"]
    assert set(kinds) <= {"accepted", "corrected", "bonus", "plain"}


def test_generate_templated_and_raw(server, ollama):
    expected = openai_chat(server, QUESTION, max_tokens=8)["choices"][0]["message"]["content"]
    assert ollama.generate(NAME, QUESTION, options={"temperature": 0, "num_predict": 8}).response == expected
    prompt = "The capital of France is"
    raw = httpx.post(server.base_url + "/completions", timeout=600,
                     json={"prompt": prompt, "max_tokens": 6, "temperature": 0}).json()["choices"][0]["text"]
    options = {"temperature": 0, "num_predict": 6}
    assert ollama.generate(NAME, prompt, raw=True, options=options).response == raw
    streamed = list(ollama.generate(NAME, prompt, raw=True, options=options, stream=True))
    assert "".join(p.response for p in streamed) == raw and streamed[-1].done


def test_an_empty_request_loads_as_in_ollama(ollama):
    assert ollama.generate(NAME).done_reason == "load"
    assert ollama.chat(NAME, []).done_reason == "load"


def test_options_map_to_tandem_sampling(server, ollama):
    def sample(seed: int) -> str:
        return ollama.chat(NAME, [{"role": "user", "content": "Tell me a story."}],
                           options={"temperature": 1.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": seed,
                                    "num_predict": 12, "repeat_penalty": 1.1,
                                    "draft_num_predict": 5}).message.content  # a fixed draft length: see test_serve
    assert sample(1234) == sample(1234)
    full = openai_chat(server, QUESTION, max_tokens=24, ignore_eos=True)["choices"][0]["message"]["content"]
    stop = full.split()[len(full.split()) // 2]
    response = ollama.chat(NAME, [{"role": "user", "content": QUESTION}],
                           options={"temperature": 0, "num_predict": 24, "stop": [stop]})
    assert response.message.content == full[:full.find(stop)] and response.done_reason == "stop"
    # Tandem's figures ride along (the client drops them); speculation is off for one
    # request as the OpenAI routes' tandem object turns it off.
    def figures(**tandem) -> dict:
        return httpx.post(server.url + "/api/chat", timeout=600, json={
            "model": NAME, "messages": [{"role": "user", "content": QUESTION}], "stream": False,
            "options": {"temperature": 0, "num_predict": 4}, **tandem}).json()["tandem"]
    speculative, plain = figures(), figures(tandem={"speculative": False})
    assert speculative["speculative"] is True and 0 <= speculative["accepted"] <= speculative["drafted"]
    assert plain["speculative"] is False and plain["drafted"] == 0


def test_num_predict_over_the_limit_is_capped_and_minus_one_is_open_ended(ollama):
    capped = ollama.generate(NAME, "Hi", options={"temperature": 0, "num_predict": 10 ** 9})
    assert capped.done and capped.eval_count <= 4096
    assert ollama.generate(NAME, "Say hi.", options={"temperature": 0, "num_predict": -1}).done


@pytest.mark.parametrize("route, body, status, words", [
    ("/api/chat", {"model": NAME, "messages": "hi"}, 400, "messages"),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}, 400, "model is required"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "robot", "content": "hi"}]}, 400, "messages[0].role"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "options": {"temperature": "hot"}},
     400, "options.temperature"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "options": {"temperature": 9}},
     400, "options.temperature"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "options": {"stop": ["x"] * 5}},
     400, "options.stop"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, 400, "stream"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "hi", "images": ["AAAA"]}]},
     400, "images"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
    ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "think": True}, 400, "thinking"),
    ("/api/generate", {"model": NAME, "prompt": 7}, 400, "prompt"),
    ("/api/generate", {"model": NAME, "prompt": "def f():", "suffix": "return 1"}, 400, "suffix"),
    ("/api/generate", {"model": NAME, "prompt": "a", "raw": True, "system": "s"}, 400, "system"),
    ("/api/generate", {"model": NAME, "prompt": "a", "format": 5}, 400, "format"),
    ("/api/show", {}, 400, "model is required"),
])
def test_wrong_requests_are_refused_with_ollama_error_json(server, route, body, status, words):
    response = httpx.post(server.url + route, json=body, timeout=60)
    assert response.status_code == status
    error = response.json()["error"]
    assert isinstance(error, str) and words in error and "\n" not in error


def test_other_ollama_routes_are_404_in_ollama_error_json(server):
    for method, route in (("POST", "/api/pull"), ("POST", "/api/embed"), ("DELETE", "/api/delete"),
                          ("GET", "/api/chat")):
        response = httpx.request(method, server.url + route, json={"model": NAME}, timeout=60)
        assert response.status_code == 404
        assert route in response.json()["error"] and "/api/chat" in response.json()["error"]


def test_format_constrains_the_reply_to_json(server):
    """Ollama's ``format`` rides on the OpenAI routes' ``response_format``: a schema gives
    JSON that validates; ``"json"`` gives a JSON object (whole once it stops)."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    body = {"model": NAME, "prompt": "Is water wet? Answer in JSON.", "format": schema, "stream": False,
            "options": {"num_predict": 64, "temperature": 0}}
    reply = httpx.post(server.url + "/api/generate", json=body, timeout=600).json()
    assert reply["done_reason"] == "stop" and set(json.loads(reply["response"])) == {"ok"}
    body = {**body, "format": "json", "options": {"num_predict": 24, "temperature": 0}}
    reply = httpx.post(server.url + "/api/generate", json=body, timeout=600).json()
    assert reply["response"].lstrip().startswith("{")
    if reply["done_reason"] == "stop":
        assert isinstance(json.loads(reply["response"]), dict)


def test_malformed_bodies_are_400_json(server):
    with httpx.Client(base_url=server.url, timeout=120) as http:
        for route in ("/api/chat", "/api/generate", "/api/show"):
            for raw in (b"", b"{", b"[1, 2]", b"\xff\xfe", b"[" * 100_000):
                response = http.post(route, content=raw, headers={"content-type": "application/json"})
                assert response.status_code == 400, (route, raw[:10])
                assert isinstance(response.json()["error"], str)
        # The server is still up and serving.
        assert http.get("/api/tags").status_code == 200
