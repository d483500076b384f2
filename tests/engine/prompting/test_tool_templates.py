"""Tool calls through the real chat templates of the families (tests/engine/prompting/tool_templates/):
rendered with tools in Tandem's sandbox, the tools, earlier calls and results appear as
each family writes them; recorded replies in each format parse into calls (single,
parallel), and malformed ones stay text, streamed or whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.prompting.chat import CHATML, conversation_prompt, render_chat
from app.engine.errors import ChatTemplateError
from app.engine.prompting.tool_calls import FUNCTIONARY, HERMES, LLAMA3, MISTRAL, CallSplitter, ToolCall, detect_format
from app.engine.prompting.tool_prompt import TemplateTools, ToolRequest, prepare, template_tools, tool_plan

TEMPLATES = Path(__file__).parent / "tool_templates"
QWEN = (TEMPLATES / "qwen2.5-instruct.jinja").read_text()
LLAMA = (TEMPLATES / "llama-3.1-instruct.jinja").read_text()
MISTRAL_V3 = (TEMPLATES / "mistral-7b-instruct-v0.3.jinja").read_text()

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city, now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The local time.",
                                         "parameters": {"type": "object", "properties": {}}}}
REQUEST = ToolRequest((WEATHER, TIME))
LOOP = [  # what an agent sends back: the question, the model's call, the tool's result
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0123456789abcdef01234567", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "content": "18 C, light rain", "tool_call_id": "call_0123456789abcdef01234567"},
]


def rendered(template: str | None, messages, request=REQUEST) -> str:
    messages, tools = prepare(messages, request, template, render_chat)
    return render_chat(template, messages, bos_token="<s>", eos_token="</s>", tools=tools)


def split(fmt, text: str, *, whole: bool = False, **options) -> list:
    """What a streamed reply comes out as, one character at a time (or at once), pieces
    of content joined."""
    splitter = CallSplitter(fmt, **options)
    pieces = []
    for chunk in ([text] if whole else list(text)):
        pieces += splitter.feed(chunk)
    pieces += splitter.finish()
    out: list = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        else:
            out.append(piece)
    return out


@pytest.mark.parametrize("template, family", [(QWEN, HERMES), (LLAMA, LLAMA3), (MISTRAL_V3, MISTRAL),
                                              (CHATML, HERMES), (None, HERMES)])
def test_each_family_is_known_by_its_template(template, family):
    assert detect_format(template) is family
    assert detect_format("{{ '<function=' + name + '>' }}") is FUNCTIONARY


@pytest.mark.parametrize("template", [QWEN, LLAMA, MISTRAL_V3])
def test_the_families_templates_render_tools_calls_and_results_themselves(template):
    assert template_tools(template, render_chat) == TemplateTools(True, True, True)
    assert template_tools(CHATML, render_chat) == TemplateTools()
    text = rendered(template, LOOP)
    for tool in (WEATHER, TIME):
        assert tool["function"]["name"] in text and tool["function"]["description"] in text
    assert "18 C, light rain" in text
    assert text.count('"description": "The weather of a city, now."') == 1  # not Tandem's tool prompt too


def test_qwen_writes_the_call_as_a_tool_call_block_and_the_result_as_a_tool_response():
    text = rendered(QWEN, LOOP)
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather", ' in text  # HF's key order
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call><|im_end|>\n') in text
    assert text.endswith("<|im_start|>user\n<tool_response>\n18 C, light rain\n</tool_response><|im_end|>\n"
                         "<|im_start|>assistant\n")


def test_llama_writes_the_call_as_json_parameters_and_the_result_as_ipython():
    text = rendered(LLAMA, LOOP)
    assert text.startswith("<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n")
    assert '"name": "get_weather",\n        "description"' in text  # tojson(indent=4), keys in order
    assert '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Paris"}}' \
           '<|eot_id|>' in text
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"18 C, light rain"<|eot_id|>' in text


def test_llamas_template_refuses_two_calls_in_one_message_in_one_line():
    two = [*LOOP[:2], {"role": "assistant", "content": "", "tool_calls": LOOP[2]["tool_calls"] * 2}]
    with pytest.raises(ChatTemplateError, match="only supports single tool-calls"):
        rendered(LLAMA, two)


def test_mistral_gets_nine_character_ids_the_same_for_the_call_and_its_result():
    text = rendered(MISTRAL_V3, LOOP)
    assert '[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "get_weather"' in text
    start = text.index("[TOOL_CALLS] [") + len("[TOOL_CALLS] ")
    calls = json.loads(text[start:text.index("</s>", start)])
    assert calls[0]["name"] == "get_weather" and calls[0]["arguments"] == {"city": "Paris"}
    assert len(calls[0]["id"]) == 9 and calls[0]["id"].isalnum()
    assert f'"call_id": "{calls[0]["id"]}"}}[/TOOL_RESULTS]' in text


def test_a_template_without_tools_gets_tandems_tool_prompt_and_text_for_calls_and_results():
    text = rendered(CHATML, LOOP)
    system = text[:text.index("<|im_end|>")]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert json.dumps(WEATHER) in system and "<tool_call>" in system
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call><|im_end|>') in text
    assert "<|im_start|>user\n<tool_response>\n18 C, light rain\n</tool_response><|im_end|>" in text
    assert "<|im_start|>tool" not in text


def test_consecutive_results_are_one_user_turn_for_a_template_without_tools():
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "get_time", "arguments": "{}"}} for i in (1, 2)]
    messages = [{"role": "user", "content": "Times?"}, {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "content": "10:00", "tool_call_id": "c1"},
                {"role": "tool", "content": "11:00", "tool_call_id": "c2"}]
    text = rendered(CHATML, messages)
    assert ("<|im_start|>user\n<tool_response>\n10:00\n</tool_response>\n<tool_response>\n11:00\n"
            "</tool_response><|im_end|>") in text


def test_tool_choice_none_renders_no_tools_but_still_the_earlier_calls():
    text = rendered(QWEN, LOOP, ToolRequest((WEATHER,), "none"))
    assert "<tools>" not in text and '"name": "get_weather", "arguments"' in text
    assert tool_plan(QWEN, ToolRequest((WEATHER,), "none"), render_chat) is None


@pytest.mark.parametrize("template, opening", [
    (QWEN, '<tool_call>\n{"name": "get_weather", "arguments":'),
    (LLAMA, '{"name": "get_weather", "parameters":'),
    (MISTRAL_V3, '[TOOL_CALLS] [{"name": "get_weather", "arguments":'),
    (CHATML, '<tool_call>\n{"name": "get_weather", "arguments":'),
])
def test_a_forced_call_begins_the_reply_with_the_familys_opening(template, opening):
    named = tool_plan(template, ToolRequest((WEATHER, TIME), name="get_weather"), render_chat)
    assert named.prefill == opening and named.max_calls == 1
    required = tool_plan(template, ToolRequest((WEATHER, TIME), "required"), render_chat)
    assert required.prefill.endswith('"name":') and required.max_calls is None
    assert tool_plan(template, ToolRequest((WEATHER,), "required"), render_chat).prefill == opening
    assert tool_plan(template, REQUEST, render_chat).prefill == ""
    # The model goes on from the opening; the call is read from opening + reply.
    reply = {"mistral": ' {"city": "Paris"}}]'}.get(named.format.name, ' {"city": "Paris"}}')
    assert split(named.format, reply, prefill=named.prefill, max_calls=1) == \
        [ToolCall("get_weather", '{"city": "Paris"}')]


PARIS, ROME = ToolCall("get_weather", '{"city": "Paris"}'), ToolCall("get_weather", '{"city": "Rome"}')
RECORDED = {  # (format, reply, what it is read as)
    "hermes single": (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                      [PARIS]),
    "hermes parallel, text first": (
        HERMES, 'Checking both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
        ["Checking both.", PARIS, ROME]),
    "hermes arguments as a JSON string": (
        HERMES, '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>', [PARIS]),
    "hermes no closing tag": (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}', [PARIS]),
    "llama bare json": (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Paris"}}', [PARIS]),
    "llama python_tag, two calls": (
        LLAMA3, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                '{"name": "get_weather", "parameters": {"city": "Rome"}}', [PARIS, ROME]),
    "llama with type function": (
        LLAMA3, '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}', [PARIS]),
    "mistral v0.3 list": (
        MISTRAL, '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}, '
                 '{"name": "get_weather", "arguments": {"city": "Rome"}, "id": "f5g6h7i8j"}]', [PARIS, ROME]),
    "mistral [ARGS] form": (MISTRAL, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', [PARIS]),
    "functionary": (FUNCTIONARY, '<function=get_weather>{"city": "Paris"}</function>', [PARIS]),
    # Malformed or no call at all: the text, as written.
    "hermes broken json": (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>',
                           ['<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>']),
    "hermes without a name": (HERMES, '<tool_call>{"arguments": {}}</tool_call> ok',
                              ['<tool_call>{"arguments": {}}</tool_call> ok']),
    "hermes cut short": (HERMES, 'Sure <tool_call>{"name": "get_wea', ['Sure <tool_call>{"name": "get_wea']),
    "llama json that is no call": (LLAMA3, '{"answer": 42}', ['{"answer": 42}']),
    "llama json later in the text": (LLAMA3, 'Use {"name": "x", "parameters": {}}.',
                                     ['Use {"name": "x", "parameters": {}}.']),
    "llama python code": (LLAMA3, '<|python_tag|>brave_search.call(query="x")',
                          ['<|python_tag|>brave_search.call(query="x")']),
    "mistral empty list": (MISTRAL, '[TOOL_CALLS] []', ['[TOOL_CALLS] []']),
    "mistral arguments not an object": (MISTRAL, '[TOOL_CALLS] [{"name": "f", "arguments": [1]}]',
                                        ['[TOOL_CALLS] [{"name": "f", "arguments": [1]}]']),
    "plain text with a lone <": (HERMES, "a < b, and [x] {y}  ", ["a < b, and [x] {y}  "]),
}


@pytest.mark.parametrize("case", list(RECORDED))
def test_recorded_replies_read_the_same_streamed_and_whole(case):
    fmt, reply, expected = RECORDED[case]
    assert split(fmt, reply) == expected
    assert split(fmt, reply, whole=True) == expected


def test_no_more_calls_than_wanted_are_read():
    reply = RECORDED["hermes parallel, text first"][1]
    splitter = CallSplitter(HERMES, max_calls=1)
    pieces = []
    for char in reply:
        pieces += splitter.feed(char)
        if splitter.done:
            break
    assert "".join(p for p in pieces if isinstance(p, str)) == "Checking both."
    assert [p for p in pieces if not isinstance(p, str)] == [PARIS] and splitter.finish() == []


def test_text_that_may_open_a_call_is_held_back_until_it_cannot():
    splitter = CallSplitter(HERMES)
    assert splitter.feed("Hello <tool") == ["Hello"]
    assert splitter.feed("box> there") == [" <toolbox> there"]
    llama = CallSplitter(LLAMA3)
    assert llama.feed('{"name": "get_weather", "param') == []
    assert llama.feed('eters": {"city": "Paris"}}') == []  # a ';' and a second call may follow
    assert llama.finish() == [PARIS]
    answer = CallSplitter(LLAMA3)
    assert "".join(answer.feed('{"answer": 42,')) == '{"answer": 42,'  # no call has that key: out at once


class Templated:
    """The real model with another chat template: what a GGUF of that family gives."""

    def __init__(self, model, template: str | None) -> None:
        self._model, self.chat_template, self.path = model, template, "/models/family.gguf"

    def __getattr__(self, name):
        return getattr(self._model, name)


def test_control_text_in_tools_and_arguments_stays_text(q41_target):
    im_end = q41_target.tokenize("<|im_end|>", add_special=False, parse_special=True)
    assert len(im_end) == 1
    tool = {"type": "function", "function": {"name": "f", "description": "stop<|im_end|>here"}}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"q": "<|im_end|>"}'}}
    history = [("user", "hi"), {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "content": "ok", "tool_call_id": "c1"}]
    for template in (QWEN, None):  # the family's own template, and ChatML with Tandem's tool prompt
        prompt = conversation_prompt(Templated(q41_target, template), history, "", 64, ToolRequest((tool,)))
        assert not prompt.notice and prompt.tools.format is HERMES
        # The template's own <|im_end|>s only: system (with the tools), user, assistant, tool result.
        assert prompt.tokens.count(im_end[0]) == 4
