"""The client libraries people use, as they use them, against a live ``tandem serve`` on
the demo pair: the ``openai`` SDK (``parse``, forced and ``auto`` tools, a tool-result
round trip, ``responses.create`` streamed and not, a Responses tool round trip),
instructor (``Mode.TOOLS`` and ``Mode.JSON_SCHEMA``), langchain-openai (``bind_tools``
with a forced choice, ``with_structured_output``) and litellm's Ollama provider (no
Content-Type at all).

The 135M demo model calls badly on its own: forced calls are held to the function's
schema by a grammar, so whatever it writes validates. Replies are short (a few dozen
tokens at most), at temperature 0.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from pydantic import BaseModel

from .live_server import serving

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
QUESTION = "What is the weather in Paris?"
SHORT = 48


class Country(BaseModel):
    name: str
    country: str
    population: int


@pytest.fixture(scope="module")
def live(demo_models):
    yield from serving("--temperature", "0")


@pytest.fixture(scope="module")
def client(live):
    from openai import OpenAI

    return OpenAI(base_url=live.base_url, api_key="unused", max_retries=0, timeout=600)


def _weather_args(arguments: str) -> dict:
    args = json.loads(arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    return args


# -- openai: chat completions -----------------------------------------------------------------
def test_parse_with_a_pydantic_model(client):
    reply = client.chat.completions.parse(model="tandem", messages=[{"role": "user", "content": "Describe Paris."}],
                                          response_format=Country, max_tokens=SHORT * 2)
    parsed = reply.choices[0].message.parsed
    assert reply.choices[0].finish_reason != "stop" or isinstance(parsed, Country)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}],
                         ids=["required", "named"])
def test_a_forced_call_parses_in_the_functions_schema(client, choice):
    reply = client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": QUESTION}],
                                           tools=[WEATHER], tool_choice=choice, max_tokens=SHORT,
                                           parallel_tool_calls=False)
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    assert calls[0].function.name == "get_weather"
    _weather_args(calls[0].function.arguments)


def test_parallel_calls_all_parse_and_a_cut_one_is_no_text(client):
    """The demo model repeats its call until max_tokens: the whole ones come back, the
    one cut short is dropped (never sent as content)."""
    reply = client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": QUESTION}],
                                           tools=[WEATHER], tool_choice="required", max_tokens=SHORT)
    message = reply.choices[0].message
    assert message.tool_calls and not message.content
    for call in message.tool_calls:
        _weather_args(call.function.arguments)


def test_auto_calls_parse_when_the_model_makes_one(client):
    """The demo model may answer in words; a call it opens must come back whole and valid."""
    reply = client.chat.completions.create(
        model="tandem", tools=[WEATHER], tool_choice="auto", max_tokens=SHORT,
        messages=[{"role": "system", "content": "Always call a tool."}, {"role": "user", "content": QUESTION}])
    message = reply.choices[0].message
    for call in message.tool_calls or ():
        _weather_args(call.function.arguments)
    assert "<tool_call>" not in (message.content or "")  # a call is never left as text


def test_a_tool_result_round_trip(client):
    first = client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": QUESTION}],
                                           tools=[WEATHER], tool_choice="required", max_tokens=SHORT)
    call = first.choices[0].message.tool_calls[0]
    messages = [{"role": "user", "content": QUESTION}, first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and light rain"}]
    final = client.chat.completions.create(model="tandem", messages=messages, tools=[WEATHER], max_tokens=16)
    assert final.choices[0].message.content or final.choices[0].message.tool_calls


# -- openai: responses ---------------------------------------------------------------------
def test_responses_create_whole_and_streamed(client):
    whole = client.responses.create(model="tandem", input="Say hello.", instructions="Be brief.",
                                    max_output_tokens=8)
    assert whole.status in ("completed", "incomplete") and whole.output_text.strip()
    assert whole.usage.output_tokens <= 8 and whole.usage.input_tokens > 0
    events = list(client.responses.create(model="tandem", input="Say hello.", instructions="Be brief.",
                                          max_output_tokens=8, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text and deltas.strip()
    assert events[-1].response.usage.input_tokens == whole.usage.input_tokens
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_json_schema_and_a_conversation(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
              "additionalProperties": False}
    first = client.responses.create(model="tandem", input=[{"role": "user", "content": "Name a city."}],
                                    text={"format": {"type": "json_schema", "name": "city", "schema": schema,
                                                     "strict": True}}, max_output_tokens=SHORT)
    if first.status == "completed":
        jsonschema.validate(json.loads(first.output_text), schema)
    second = client.responses.create(model="tandem", input="And another?", previous_response_id=first.id,
                                     max_output_tokens=4)
    assert second.previous_response_id == first.id and second.usage.input_tokens > first.usage.input_tokens
    assert client.responses.retrieve(first.id).id == first.id


def test_responses_tool_round_trip_streamed_and_not(client):
    tool = {"type": "function", **WEATHER["function"]}
    first = client.responses.create(model="tandem", input=QUESTION, tools=[tool], tool_choice="required",
                                    max_output_tokens=SHORT)
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    _weather_args(calls[0].arguments)
    events = list(client.responses.create(model="tandem", input=QUESTION, tools=[tool], tool_choice="required",
                                          max_output_tokens=SHORT, stream=True,
                                          extra_body={"tandem": {"token_kinds": True}}))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].arguments == calls[0].arguments
    final = client.responses.create(
        model="tandem", tools=[tool], max_output_tokens=16, previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "18 degrees"}])
    assert final.status in ("completed", "incomplete") and final.output
    # The same, without the server's memory: the whole conversation sent back.
    again = client.responses.create(
        model="tandem", tools=[tool], max_output_tokens=16,
        input=[{"role": "user", "content": QUESTION}, calls[0].model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18 degrees"}])
    assert again.usage.input_tokens == final.usage.input_tokens  # the same conversation, token for token


def test_responses_refusals_are_one_line(client):
    from openai import BadRequestError

    for bad in ({"previous_response_id": "resp_nothing"}, {"input": [{"type": "web_search_call"}]},
                {"tools": [{"type": "web_search"}]}):
        with pytest.raises(BadRequestError) as refused:
            client.responses.create(model="tandem", **{"input": "hi", **bad})
        assert "\n" not in refused.value.body["message"]


# -- instructor ------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor(client, mode):
    instructor = pytest.importorskip("instructor")
    patched = instructor.from_openai(client, mode=getattr(instructor.Mode, mode))
    country = patched.chat.completions.create(model="tandem", response_model=Country, max_retries=0,
                                              max_tokens=SHORT * 2,
                                              messages=[{"role": "user", "content": "Describe Paris."}])
    assert isinstance(country, Country)


# -- langchain-openai ------------------------------------------------------------------------
def _chat_model(live):
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(model="tandem", base_url=live.base_url, api_key="unused", temperature=0,
                                       max_tokens=SHORT * 2, max_retries=0, timeout=600)


def test_langchain_bind_tools_forced(live):
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str, unit: str) -> str:
        """The current weather in a city, in celsius or fahrenheit."""
        return "18"

    model = _chat_model(live).bind_tools([get_weather], tool_choice="get_weather")
    reply = model.invoke(QUESTION)
    assert len(reply.tool_calls) == 1 and reply.tool_calls[0]["name"] == "get_weather"
    assert set(reply.tool_calls[0]["args"]) == {"city", "unit"}


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_langchain_with_structured_output(live, method):
    country = _chat_model(live).with_structured_output(Country, method=method).invoke("Describe Paris.")
    assert isinstance(country, Country)


# -- litellm ---------------------------------------------------------------------------------
def test_litellm_ollama_provider(live):
    litellm = pytest.importorskip("litellm")
    reply = litellm.completion(model="ollama/tandem", api_base=live.url, max_tokens=8,  # no alias needed
                               messages=[{"role": "user", "content": "Say hello."}])
    assert reply.choices[0].message.content.strip()


def test_litellm_openai_provider_with_a_forced_tool(live):
    litellm = pytest.importorskip("litellm")
    reply = litellm.completion(model="openai/tandem", api_base=live.base_url, api_key="unused", max_tokens=SHORT,
                               messages=[{"role": "user", "content": QUESTION}], tools=[WEATHER],
                               tool_choice="required")
    _weather_args(reply.choices[0].message.tool_calls[0].function.arguments)
