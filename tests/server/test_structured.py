"""``response_format`` and ``logprobs`` against a live ``tandem serve`` with the official
``openai`` client. The server runs the strict pair (Q4_1 target, Q4_0 draft), whose
batched and single-token logits are bit-identical, so speculation on and off must give
the same tokens and the same log-probabilities."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from openai import BadRequestError

from .live_server import LiveServer

CITY = {"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"},
                       "coastal": {"type": "boolean"}},
        "required": ["city", "population", "coastal"], "additionalProperties": False}
OFF = {"tandem": {"speculative": False}}


@pytest.fixture(scope="module")
def strict_server(demo_models):
    live = LiveServer("--target", str(demo_models.draft), "--draft", str(demo_models.strict_draft))
    yield live
    code = live.stop()
    assert code == 0, live.stderr
    assert not any("Traceback" in line for line in live.stderr), "".join(live.stderr)


@pytest.fixture(scope="module")
def client(strict_server):
    from openai import OpenAI

    return OpenAI(base_url=strict_server.base_url, api_key="unused", max_retries=0, timeout=600)


def _chat(client, text, **options):
    return client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": text}],
                                          temperature=0, **options)


def _schema_format(schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": strict}}


def test_json_schema_reply_validates_and_is_the_same_with_and_without_speculation(client):
    replies = []
    for extra in ({}, OFF):
        response = _chat(client, "Describe a city as JSON.", max_tokens=60, response_format=_schema_format(CITY),
                         extra_body=extra)
        assert response.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(response.choices[0].message.content), CITY)
        replies.append(response.choices[0].message.content)
        assert response.model_extra["tandem"]["speculative"] is (extra == {})
    assert replies[0] == replies[1]


def test_json_object_streamed(client):
    ask = dict(max_tokens=80, response_format={"type": "json_object"})
    text = 'Reply with exactly this JSON: {"ok": true}'
    stream = _chat(client, text, stream=True, **ask)
    chunks = [c for c in stream if c.choices]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == _chat(client, text, **ask).choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop", streamed
    assert isinstance(json.loads(streamed), dict)


def test_completions_take_a_response_format_too(client):
    response = client.completions.create(model="tandem", prompt="A city, as JSON: ", max_tokens=60, temperature=0,
                                         extra_body={"response_format": _schema_format(CITY)})
    jsonschema.validate(json.loads(response.choices[0].text), CITY)


def test_chat_logprobs_agree_with_and_without_speculation(client):
    results = []
    for extra in ({}, OFF):
        response = _chat(client, "Name three colours.", max_tokens=12, logprobs=True, top_logprobs=3,
                         extra_body={"ignore_eos": True, **extra})
        content = response.choices[0].logprobs.content
        assert len(content) == 12
        assert "".join(t.token for t in content) == response.choices[0].message.content
        for t in content:
            assert bytes(t.bytes).decode("utf-8", "replace") or t.token == ""
            assert len(t.top_logprobs) == 3
            assert t.top_logprobs[0].token == t.token  # greedy: the top token
            assert t.logprob == pytest.approx(t.top_logprobs[0].logprob)
            assert t.logprob <= 0 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        results.append(content)
    plain, spec = results[1], results[0]
    assert [t.token for t in spec] == [t.token for t in plain]
    for a, b in zip(spec, plain):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert [x.token for x in a.top_logprobs] == [x.token for x in b.top_logprobs]


def test_streamed_logprobs_match_the_whole_reply(client):
    whole = _chat(client, "Say hello.", max_tokens=8, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    stream = _chat(client, "Say hello.", max_tokens=8, logprobs=True, top_logprobs=2, stream=True,
                   extra_body={"ignore_eos": True})
    streamed = [t for c in stream if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [(t.token, round(t.logprob, 6)) for t in streamed] == \
        [(t.token, round(t.logprob, 6)) for t in whole.choices[0].logprobs.content]


def test_logprobs_under_a_schema_are_of_the_masked_distribution(client):
    response = _chat(client, "Describe a city as JSON.", max_tokens=60, response_format=_schema_format(CITY),
                     logprobs=True, top_logprobs=5)
    first = response.choices[0].logprobs.content[0]
    assert first.token.startswith("{")
    # Only '{' (with or without what may follow it at once) is allowed first: the
    # alternatives the grammar forbids are not listed, and the masked mass is renormalised.
    assert all(t.token.startswith("{") for t in first.top_logprobs)


def test_completion_logprobs(client):
    response = client.completions.create(model="tandem", prompt="The sky is", max_tokens=6, temperature=0,
                                         logprobs=2, extra_body={"ignore_eos": True})
    logprobs = response.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 6
    assert "".join(logprobs.tokens) == response.choices[0].text
    offsets = [sum(len(t) for t in logprobs.tokens[:i]) for i in range(6)]
    assert logprobs.text_offset == offsets
    assert all(len(top) <= 2 and max(top.values()) == pytest.approx(lp) for top, lp in
               zip(logprobs.top_logprobs, logprobs.token_logprobs))


@pytest.mark.parametrize("body, says", [
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "json_schema object is needed"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": CITY}}}, "name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "nope"}}}, "schema"),
    ({"response_format": _schema_format({"type": "array", "maxItems": 10 ** 12})}, "maxItems"),
    ({"response_format": _schema_format({"type": "string", "pattern": "^(a{100000}){100000}$"})}, "repetition"),
    ({"response_format": _schema_format({"$ref": "https://evil.example/s.json"})}, "local references"),
    ({"response_format": _schema_format({"type": "wat"})}, "converter cannot handle"),
    ({"response_format": _schema_format({"type": "integer", "minimum": 1})}, "cannot enforce"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "needs logprobs"),
    ({"logprobs": "yes"}, "logprobs"),
])
def test_bad_response_format_and_logprobs_are_refused(strict_server, body, says):
    request = {"model": "tandem", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **body}
    response = httpx.post(strict_server.base_url + "/chat/completions", json=request, timeout=120)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert says in message and "\n" not in message


def test_a_deeply_nested_schema_is_refused(strict_server):
    deep = {"type": "object"}
    for _ in range(100):
        deep = {"type": "object", "properties": {"a": deep}}
    for route, prompt in (("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                          ("/completions", {"prompt": "hi"})):
        response = httpx.post(strict_server.base_url + route, timeout=120,
                              json={"model": "tandem", "max_tokens": 2, "response_format": _schema_format(deep), **prompt})
        assert response.status_code == 400 and "deeper" in response.json()["error"]["message"]


def test_completion_logprobs_over_the_limit_are_refused(client):
    with pytest.raises(BadRequestError, match="logprobs"):
        client.completions.create(model="tandem", prompt="Hi", max_tokens=2, logprobs=21)
