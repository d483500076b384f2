"""Tool calls with the official ``openai`` client against a live ``tandem serve`` on the
demo pair: the whole loop (call, ``tool`` result, answer), streamed and not; the
stream's shape; what a request gets wrong, refused in one line.

The 135M demo model calls badly on its own, so the loop names the function
(``tool_choice``), at temperature 0: the reply must be a call, and is the same each time.
Its template (ChatML) knows no tools, so this is also Tandem's own tool prompt at work.
With two tools and a forced name it leaves a brace out, a malformed call that comes
back as text (``tests/engine/prompting/test_tool_templates.py`` reads such replies).
"""

from __future__ import annotations

import json

import httpx
import pytest

from app.engine.prompting.chat import conversation_prompt
from app.server.requests import Defaults, chat_job

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The local time in a city.",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
RESULT = "18 degrees and light rain"


def ask(client, messages, **options):
    return client.chat.completions.create(model="tandem", messages=messages, temperature=0, max_tokens=64,
                                          **options)


def streamed(client, messages, **options):
    """A streamed reply put together as a client does: its content, its calls, the chunks."""
    chunks = list(ask(client, messages, stream=True, stream_options={"include_usage": True}, **options))
    content, calls = "", {}
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or ():
            call = calls.setdefault(piece.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = piece.id or call["id"]
            call["name"] += piece.function.name or ""
            call["arguments"] += piece.function.arguments or ""
    return content, [calls[i] for i in sorted(calls)], chunks


def follow_up(call_id: str, name: str, arguments: str) -> list[dict]:
    return [*QUESTION,
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": RESULT}]


def test_the_whole_loop_call_result_answer(client, f32_target):
    first = ask(client, QUESTION, tools=[WEATHER], tool_choice=NAMED)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_") and len(call.id) == 29
    assert isinstance(json.loads(call.function.arguments), dict)

    # As agents do: the reply's own message object goes back, then the tool's result.
    sent = [*QUESTION, choice.message, {"role": "tool", "tool_call_id": call.id, "content": RESULT}]
    final = ask(client, sent, tools=[WEATHER, TIME], tool_choice="none")
    answer = final.choices[0]
    assert answer.finish_reason in ("stop", "length") and answer.message.content and not answer.message.tool_calls

    # The server rendered the call and its result as the engine does, with Tandem's tool
    # prompt (the demo's template knows no tools) and the result as a tool response.
    messages = follow_up(call.id, call.function.name, call.function.arguments)
    body = {"messages": messages, "tools": [WEATHER, TIME], "tool_choice": "none", "max_tokens": 64}
    spec = chat_job(body, Defaults())
    prompt = conversation_prompt(f32_target, spec.history, spec.system, spec.max_tokens, spec.tools)
    assert final.usage.prompt_tokens == len(prompt.tokens)
    text = "".join(f32_target.token_text(t) for t in prompt.tokens)
    assert f"<tool_response>\n{RESULT}\n</tool_response>" in text
    assert f'<tool_call>\n{{"name": "get_weather", "arguments": {call.function.arguments}}}\n</tool_call>' in text
    assert "# Tools" not in text  # tool_choice none: no tools shown

    with_tools = chat_job({**body, "tool_choice": "auto"}, Defaults())
    shown = conversation_prompt(f32_target, with_tools.history, "", 48, with_tools.tools)
    assert '"name": "get_time"' in "".join(f32_target.token_text(t) for t in shown.tokens)


def test_the_loop_streamed_reads_as_the_whole_reply(client):
    whole = ask(client, QUESTION, tools=[WEATHER], tool_choice=NAMED).choices[0].message.tool_calls[0]
    content, calls, chunks = streamed(client, QUESTION, tools=[WEATHER], tool_choice=NAMED,
                                      extra_body={"tandem": {"token_kinds": True}})
    assert content == ""
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", whole.function.arguments)]
    assert calls[0]["id"].startswith("call_")
    # OpenAI's shape: the opening role, a chunk with the id, type and name (no
    # arguments yet), then the arguments, then the finish reason.
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert deltas[0].delta.role == "assistant"
    opening = next(d.delta.tool_calls[0] for d in deltas if d.delta.tool_calls)
    assert opening.index == 0 and opening.type == "function" and opening.id == calls[0]["id"]
    assert opening.function.name == "get_weather" and opening.function.arguments == ""
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["tool_calls"]
    usage = chunks[-1].usage
    kinds = [k for c in chunks if c.choices for k in (c.model_extra.get("tandem") or {}).get("token_kinds", [])]
    assert len(kinds) == usage.completion_tokens > 0

    messages = follow_up(calls[0]["id"], calls[0]["name"], calls[0]["arguments"])
    answer, more_calls, answer_chunks = streamed(client, messages, tools=[WEATHER, TIME], tool_choice="none")
    assert answer and not more_calls
    final = ask(client, messages, tools=[WEATHER, TIME], tool_choice="none")
    assert answer == final.choices[0].message.content


def test_required_with_one_tool_and_parallel_calls_off_gives_one_call(client):
    reply = ask(client, QUESTION, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    assert choice.message.tool_calls[0].function.name == "get_weather"


def test_auto_streamed_and_whole_agree(client):
    whole = ask(client, QUESTION, tools=[WEATHER])
    content, calls, _ = streamed(client, QUESTION, tools=[WEATHER])
    message = whole.choices[0].message
    assert content == (message.content or "")
    assert [(c["name"], c["arguments"]) for c in calls] == \
        [(c.function.name, c.function.arguments) for c in message.tool_calls or ()]


BAD = {
    "tools not a list": ({"tools": {"type": "function"}}, "tools"),
    "a tool of another type": ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type"),
    "a tool without its function": ({"tools": [{"type": "function"}]}, "tools[0].function"),
    "a name with spaces": ({"tools": [{"type": "function", "function": {"name": "get weather"}}]},
                           "tools[0].function.name"),
    "parameters not an object": ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
                                 "tools[0].function.parameters"),
    "no tools at all": ({"tools": []}, "tools"),
    "one name twice": ({"tools": [WEATHER, WEATHER]}, "tools"),
    "an unknown choice": ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    "a named choice not among the tools": ({"tools": [WEATHER], "tool_choice": {
        "type": "function", "function": {"name": "get_time"}}}, "tool_choice.function.name"),
    "a named choice without a name": ({"tools": [WEATHER], "tool_choice": {"type": "function"}},
                                      "tool_choice.function"),
    "required without tools": ({"tool_choice": "required"}, "tool_choice"),
    "parallel_tool_calls not a boolean": ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    "arguments not a string": ({"messages": [*QUESTION, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}]},
        "messages[1].tool_calls[0].function.arguments"),
    "a call without an id": ({"messages": [*QUESTION, {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}]}, "messages[1].tool_calls[0].id"),
    "calls on a user message": ({"messages": [{"role": "user", "content": "x", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}, "messages[0].tool_calls"),
    "a tool result without its call's id": ({"messages": [*QUESTION, {"role": "tool", "content": "18"}]},
                                            "messages[1].tool_call_id"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_wrong_shapes_are_refused_in_one_line(server, case):
    fields, param = BAD[case]
    body = {"model": "tandem", "messages": QUESTION, "max_tokens": 4, **fields}
    response = httpx.post(server.base_url + "/chat/completions", json=body, timeout=120)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"] and "\n" not in error["message"] and len(error["message"]) < 300
