"""The official ``openai`` client against a live ``tandem serve`` on the demo pair.

Short replies (a few tokens) throughout: the models run on a slow, shared CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai import NotFoundError

from .live_server import ROOT

QUESTION = "Name three colours of the rainbow."


def figures(response) -> tuple[dict, dict]:
    extra = response.model_extra
    return extra["tandem"], extra["timings"]


def ask(client, text: str = QUESTION, **options):
    return client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": text}],
                                          temperature=0, **options)


def test_models_and_health(server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.F32.gguf"]
    assert client.models.retrieve(models.data[0].id).id == models.data[0].id
    with pytest.raises(NotFoundError):
        client.models.retrieve("no-such-model")
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["speculation"] is True


def test_chat_reply_with_usage_and_consistent_figures(client):
    response = ask(client, max_tokens=8, extra_body={"ignore_eos": True})
    choice = response.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    usage = response.usage
    assert usage.completion_tokens == 8
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    tandem, timings = figures(response)
    assert tandem["speculative"] is True and tandem["speculative_reason"] == ""
    assert 0 <= tandem["accepted"] <= tandem["drafted"]
    assert tandem["acceptance"] == pytest.approx(tandem["accepted"] / tandem["drafted"], abs=1e-3)
    assert tandem["tokens_per_round"] == pytest.approx(8 / tandem["rounds"], abs=1e-3)
    assert sum(tandem["token_kind_counts"].values()) == 8
    assert timings["predicted_n"] == usage.completion_tokens
    assert timings["draft_n"] == tandem["drafted"] and timings["draft_n_accepted"] == tandem["accepted"]
    assert timings["cache_n"] == usage.prompt_tokens_details.cached_tokens == tandem["prompt_reused"]
    assert timings["prompt_n"] == usage.prompt_tokens - timings["cache_n"]


def test_streamed_chat_equals_the_whole_reply(client):
    whole = ask(client, max_tokens=10)
    chunks = list(ask(client, max_tokens=10, stream=True, stream_options={"include_usage": True},
                      extra_body={"tandem": {"token_kinds": True}}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == [whole.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage.completion_tokens == whole.usage.completion_tokens
    kinds = [k for c in chunks if c.choices and c.choices[0].delta.content
             for k in c.model_extra["tandem"]["token_kinds"]]
    assert len(kinds) == usage.completion_tokens
    assert set(kinds) <= {"accepted", "corrected", "bonus", "plain"}
    # The resent question was in the cache already: only the last token evaluated again.
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1


def test_completions_streamed_and_not(client):
    whole = client.completions.create(model="tandem", prompt="The capital of France is", max_tokens=6, temperature=0)
    assert whole.choices[0].text and whole.usage.completion_tokens <= 6
    streamed = client.completions.create(model="tandem", prompt="The capital of France is", max_tokens=6,
                                         temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == whole.choices[0].text


def test_a_raw_prompt_s_control_tokens_are_the_model_s_and_a_chat_s_never(client):
    """A completions prompt is the client's whole text, template included (an agent's own
    ChatML, an editor's fill-in-the-middle markers): its control tokens reach the model
    as such, as llama-server reads them. A chat message's never do."""
    response = client.completions.create(model="tandem", prompt="<|im_end|>", max_tokens=1, temperature=0)
    assert response.usage.prompt_tokens == 1  # the one control token, not '<', '|', 'im', ...
    plain = client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=1, temperature=0)
    marked = client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": "<|im_end|>"}],
                                            max_tokens=1, temperature=0)
    assert marked.usage.prompt_tokens >= plain.usage.prompt_tokens + 2  # as text, several tokens


def test_temperature_zero_is_what_tandem_generate_writes(client):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "app", "generate", "--prompt", QUESTION, "--json",
                             "--max-tokens", "24", "--temperature", "0"], capture_output=True, text=True, timeout=600, env=env,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    expected = json.loads(result.stdout.strip().splitlines()[-1])["text"]
    assert ask(client, max_tokens=24).choices[0].message.content == expected


def test_stop_sequence_ends_the_reply_before_it(client):
    full = ask(client, max_tokens=24, extra_body={"ignore_eos": True}).choices[0].message.content
    words = full.split()
    stop = words[len(words) // 2]
    expected = full[:full.find(stop)]
    response = ask(client, max_tokens=24, stop=[stop], extra_body={"ignore_eos": True})
    assert response.choices[0].message.content == expected
    assert response.choices[0].finish_reason == "stop"
    streamed = ask(client, max_tokens=24, stop=stop, stream=True, extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == expected


def test_same_seed_same_sample(client):
    # A fixed draft length: with "auto" the rounds' lengths follow measured timings, and
    # where a round ends decides which random numbers each token is drawn with (docs/api.md).
    def sample():
        return client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": "Tell me a story."}],
                                              temperature=1.0, seed=1234, max_tokens=12,
                                              extra_body={"tandem": {"draft_max": 5}}).choices[0].message.content
    assert sample() == sample()


def test_speculation_off_per_request(client):
    response = ask(client, max_tokens=4, extra_body={"tandem": {"speculative": False}})
    tandem, _ = figures(response)
    assert tandem["speculative"] is False and tandem["drafted"] == 0
    assert tandem["speculative_reason"] == "off for this request"
    assert set(tandem["token_kind_counts"]) == {"plain"}


def test_an_agent_resending_its_history_evaluates_only_the_new_part(client):
    history = [{"role": "system", "content": "You edit code."},
               {"role": "user", "content": "def add(a, b):\n    return a - b\n\nFix the bug."}]
    first = client.chat.completions.create(model="tandem", messages=history, max_tokens=8, temperature=0)
    history += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "Now add a docstring."}]
    second = client.chat.completions.create(model="tandem", messages=history, max_tokens=4, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens - 1  # every token of the first prompt but its last
    assert figures(second)[1]["prompt_n"] == second.usage.prompt_tokens - cached


def test_a_client_that_disconnects_is_cancelled_and_the_next_is_served(server, client):
    body = {"messages": [{"role": "user", "content": "Write a very long essay."}], "max_tokens": 1500,
            "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=600) as http:
        with http.stream("POST", server.base_url + "/chat/completions", json=body) as stream:
            lines = stream.iter_lines()
            chunks = []
            for line in lines:
                if line.startswith("data:"):
                    chunks.append(line)
                if len(chunks) >= 4:
                    break
    # The stream is closed: the next request is answered, and the first one stopped short.
    assert ask(client, max_tokens=2).choices[0].message.content is not None
    records = httpx.get(server.url + "/tandem/requests").json()["data"]
    cancelled = [r for r in records if r["finish_reason"] == "cancelled"]
    assert cancelled and cancelled[-1]["completion_tokens"] < 1500
    assert records[-1]["finish_reason"] in ("stop", "length")


def test_twenty_concurrent_clients_all_answered_in_order_of_arrival(client):
    def one(i: int):
        return ask(client, f"Count from {i} to {i + 3}.", max_tokens=8)

    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(one, range(20)))
    assert all(r.choices[0].message.content for r in responses)
    order = sorted(figures(r)[0]["request"]["arrival"] for r in responses)
    assert order == list(range(order[0], order[0] + 20))
    served = [figures(r)[0]["request"]["served"] for r in sorted(responses, key=lambda r: figures(r)[0]["request"]["arrival"])]
    assert served == sorted(served) and len(set(served)) == 20


@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "temperature"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10 ** 9}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "stream"),
    ({"messages": [{"role": "user", "content": "hi"}], "tandem": {"draft_max": 0}}, "tandem.draft_max"),
    ({"prompt": 7}, "prompt"),
    ({"prompt": "a", "stop": ["x"] * 5}, "stop"),
    ({"prompt": "a", "stop": "x" * 5000}, "stop"),
])
def test_wrong_fields_are_refused_with_openai_error_json(server, body, param):
    route = "/completions" if "prompt" in body else "/chat/completions"
    response = httpx.post(server.base_url + route, json=body, timeout=60)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_malformed_oversized_and_unknown_requests_are_4xx_json(server):
    with httpx.Client(base_url=server.url, timeout=120) as http:
        for raw in (b"{", b"[1, 2]", b"\xff\xfe", b"[" * 100_000):
            response = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
            assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
        big = http.post("/v1/chat/completions", content=b"x" * (10 * 1024 * 1024),
                        headers={"content-type": "application/json"})
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
        assert http.get("/v1/nothing").status_code == 404
        assert http.get("/v1/chat/completions").json()["error"]["code"] == "method_not_allowed"
        overflow = http.post("/v1/completions", json={"prompt": "word " * 5000, "max_tokens": 1, "stream": True})
        assert overflow.status_code == 400 and overflow.json()["error"]["code"] == "context_length_exceeded"
        assert http.get("/health").json()["status"] == "ok"  # still serving


def test_cors_is_closed_unless_asked(server):
    preflight = httpx.options(server.base_url + "/chat/completions", headers={
        "Origin": "https://example.com", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers


def test_draft_length_per_request(client):
    response = ask(client, max_tokens=8, extra_body={"ignore_eos": True, "tandem": {"draft_max": 2}})
    tandem, _ = figures(response)
    assert tandem["speculative"] is True and 0 < tandem["drafted"] <= 2 * tandem["rounds"]
