"""Tool calls constrained to the functions' schemas (app/backends/tool_grammar.py) on
real replies: a forced call validates and is the same with speculation on and off; an
``auto`` reply stays free until the model opens a call; sampled tokens under the
constraint are distributed alike with and without speculation (chi-square). The
strict pair (Q4_1 target, Q4_0 draft) has batch-invariant logits."""

from __future__ import annotations

import json
from collections import Counter

import jsonschema
import numpy as np
import pytest
from scipy import stats as scistats

from app.backends.llama.grammar import GrammarError
from app.backends.tool_grammar import tool_calls_grammar, tool_constraint
from app.engine.prompting.chat import conversation_prompt
from app.engine.speculation.constraints import ConstraintError
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.prompting.tool_calls import FORMATS, CallSplitter, ToolCall
from app.engine.prompting.tool_prompt import ToolPlan, ToolRequest
from app.engine.types import SamplingConfig, SpecConfig

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo", "Lima"]},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": CITY}}
COUNTRY = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                            "population": {"type": "integer"},
                                            "languages": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                                          "maxItems": 3}},
           "required": ["name", "population", "languages"]}
COUNTRY_TOOL = {"type": "function", "function": {"name": "describe_country", "parameters": COUNTRY}}
TOOLS = (WEATHER, COUNTRY_TOOL)
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def exact_target(demo_models):
    """The strict pair's Q4_1 target on one thread. A tool prompt fills more than 256 cells
    of the cache, and from 512 (the cells a step attends over, rounded up) llama.cpp's CPU
    flash attention splits a single token's attention over the threads and sums the parts
    (``use_split_kv_path`` in ggml-cpu's ops.cpp), an order no verification batch takes:
    with two threads the plain and the speculative reply can part at a near-tie (the
    caveat of docs/speculative.md, "What lossless means"). On one thread both take the
    same path, so any difference left is the engine's."""
    from app.backends.llama.backend import LlamaBackend

    model = LlamaBackend(demo_models.draft, n_ctx=2048, n_threads=1)
    yield model
    model.close()


def _engines(target, draft):
    return SpeculativeEngine(target), SpeculativeEngine(target, ModelDrafter(draft, target.n_vocab,
                                                                             eog_ids=target.eog_ids))


def _reply(engine, target, request, sampling, spec, n=80, text=QUESTION):
    prompt = conversation_prompt(target, [("user", text)], "", n, request)
    constraint = tool_constraint(target, prompt.tools, request)
    # An empty cache, so both replies read the prompt the same way: a prefix another test
    # left in the session-long target was written by other batches, whose rounding can flip
    # a near-tie between the two replies.
    target.trim(0)
    try:
        events = engine.generate(prompt.tokens, sampling, spec, n, constraint=constraint).run()
    finally:
        constraint.close()
    return events, prompt.tools


def _calls(plan: ToolPlan, text: str) -> tuple[list, list[ToolCall]]:
    splitter = CallSplitter(plan.format, prefill=plan.prefill, max_calls=plan.max_calls)
    out = splitter.feed(text) + splitter.finish()
    return [p for p in out if isinstance(p, str)], [p for p in out if isinstance(p, ToolCall)]


@pytest.mark.parametrize("request_", [ToolRequest(TOOLS, "required"), ToolRequest(TOOLS, "auto", "describe_country"),
                                      ToolRequest(TOOLS, "required", parallel=False)],
                         ids=["required", "named", "required-single"])
def test_a_forced_call_validates_and_is_identical_with_and_without_speculation(exact_target, q40_draft, request_):
    plain, spec = _engines(exact_target, q40_draft)
    a, plan = _reply(plain, exact_target, request_, SamplingConfig(), SpecConfig(enabled=False))
    b, _ = _reply(spec, exact_target, request_, SamplingConfig(), SpecConfig(draft_max=4))
    assert [e.id for e in a] == [e.id for e in b]
    text = "".join(e.text for e in a)
    _, calls = _calls(plan, text)
    assert calls, text
    for call in calls:
        if request_.name:
            assert call.name == request_.name
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_auto_leaves_text_free_and_holds_a_call_it_opens(exact_target, q40_draft):
    """The demo model answers in words here: the constraint lets every token of its
    unconstrained reply by. Fed a call's opening, it only lets a valid call go on."""
    # (Speculation on and off is compared under forced calls above: on this free-text reply
    # the two differ at a near-tie even with no constraint at all, as of 4227f95.)
    request = ToolRequest(TOOLS, "auto")
    plain, _ = _engines(exact_target, q40_draft)
    a, plan = _reply(plain, exact_target, request, SamplingConfig(), SpecConfig(enabled=False), n=30)
    assert a
    prompt = conversation_prompt(exact_target, [("user", QUESTION)], "", 30, request)
    free = plain.generate(prompt.tokens, SamplingConfig(), SpecConfig(enabled=False), 30).run()
    if "<tool_call>" not in "".join(e.text for e in free):  # words only: the constraint lets every token by
        constraint = tool_constraint(exact_target, plan, request)
        for event in free:
            assert constraint.allows(np.array([event.id], dtype=np.int32))[0]
            constraint.advance(event.id)
        constraint.close()
    constraint = tool_constraint(exact_target, plan, request)
    try:
        for token in exact_target.tokenize('Let me look. <tool_call>\n{"name": "get_weather", "arguments": {"city": "',
                                         add_special=False, parse_special=True):
            constraint.advance(token)
        paris, berlin = (exact_target.tokenize(w, add_special=False, parse_special=False)[0] for w in ("Paris", "Berlin"))
        assert list(constraint.allows(np.array([paris, berlin], dtype=np.int32))) == [True, False]
        with pytest.raises(ConstraintError):
            constraint.advance(berlin)
    finally:
        constraint.close()


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_accepts_its_own_calls_and_refuses_others(exact_target, fmt):
    f = FORMATS[fmt]
    key = f.argument_keys[0]
    good = {"hermes": f'<tool_call>\n{{"name": "get_weather", "{key}": {{"city": "Oslo", "unit": "celsius"}}}}\n</tool_call>',
            "llama3": f'<|python_tag|>{{"name": "get_weather", "{key}": {{"city": "Oslo", "unit": "celsius"}}}}',
            "mistral": f'[TOOL_CALLS] [{{"name": "get_weather", "{key}": {{"city": "Oslo", "unit": "celsius"}}}}]',
            "functionary": '<function=get_weather>{"city": "Oslo", "unit": "celsius"}</function>'}[fmt]
    plan = ToolPlan(f)
    constraint = tool_constraint(exact_target, plan, ToolRequest(TOOLS))
    try:
        for token in exact_target.tokenize("Checking. " + good, add_special=False, parse_special=True):
            constraint.advance(token)
        eog = np.array(sorted(exact_target.eog_ids), dtype=np.int32)
        assert constraint.allows(eog).any()  # a whole call: the reply may end
    finally:
        constraint.close()
    bad = good.replace('"celsius"', '"kelvin"')
    constraint = tool_constraint(exact_target, plan, ToolRequest(TOOLS))
    with pytest.raises(ConstraintError):
        for token in exact_target.tokenize("Checking. " + bad, add_special=False, parse_special=True):
            constraint.advance(token)
    constraint.close()


def test_parallel_calls_off_allows_one_call_only():
    single = tool_calls_grammar(FORMATS["hermes"], list(TOOLS), parallel=False)
    several = tool_calls_grammar(FORMATS["hermes"], list(TOOLS), parallel=True)
    assert "(tc-ws tc-tagged)*" in several and "(tc-ws tc-tagged)*" not in single


def test_a_bad_parameters_schema_is_one_line():
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "frobnicate"}}}
    with pytest.raises(GrammarError) as caught:
        tool_calls_grammar(FORMATS["hermes"], [bad])
    assert "\n" not in str(caught.value)


def test_sampled_calls_follow_the_same_distribution_with_and_without_speculation(exact_target, q40_draft):
    """Temperature 1, top-k 20, the call forced: the city (an enum, four choices) and
    the tokens around it are distributed alike in both modes (two-sample chi-square)."""
    request = ToolRequest((WEATHER,), "auto", "get_weather")
    plain, spec = _engines(exact_target, q40_draft)
    n, length = 150, 7
    prompt = conversation_prompt(exact_target, [("user", QUESTION)], "", length, request)
    runs = {False: Counter(), True: Counter()}
    for seed in range(n):
        for speculative, engine in ((False, plain), (True, spec)):
            sampling = SamplingConfig(temperature=1.0, top_k=20, seed=seed + (10_000 if speculative else 0))
            config = SpecConfig(draft_max=4) if speculative else SpecConfig(enabled=False)
            constraint = tool_constraint(exact_target, prompt.tools, request)
            events = engine.generate(prompt.tokens, sampling, config, length, constraint=constraint).run()
            constraint.close()
            runs[speculative][tuple(e.id for e in events)] += 1
    frequent = [k for k in set(runs[False]) | set(runs[True]) if runs[False][k] + runs[True][k] >= 10]
    table = np.array([[runs[s][k] for k in frequent] + [n - sum(runs[s][k] for k in frequent)] for s in (False, True)])
    table = table[:, table.sum(axis=0) > 0]
    assert table.shape[1] >= 2, "the call should vary"
    assert scistats.chi2_contingency(table).pvalue > 1e-3
