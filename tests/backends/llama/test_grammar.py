"""llama.cpp's grammar constraining real replies: JSON that validates, the same with
speculation on and off, sampled tokens from the constrained target; hostile schemas
refused quickly. The strict pair (Q4_1 target, Q4_0 draft) has batch-invariant logits,
so greedy replies and their log-probabilities must match exactly."""

from __future__ import annotations

import json
import time
from collections import Counter

import jsonschema
import numpy as np
import pytest
from scipy import stats as scistats

from app.backends.llama.grammar import (MAX_REPEAT, GrammarConstraint, GrammarError, json_schema_grammar,
                                  tool_call_grammar)
from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.speculation.constraints import ConstraintError, allowed_mask, constrained_dist
from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"},
                         "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}},
          "required": ["name", "age", "pets"], "additionalProperties": False}
ANSWER = {"type": "object", "properties": {"answer": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 30}},
          "required": ["answer", "reason"]}
CASES = [("Describe a person as JSON.", PERSON), ("Is the sky blue? Answer in JSON.", ANSWER),
         ("Write any JSON object about a city.", {"type": "object"})]
N_TOKENS = 60


def _prompt(model, text):
    return chat_tokens(model, build_messages([("user", text)]))


def _engines(target, draft):
    return SpeculativeEngine(target), SpeculativeEngine(target, ModelDrafter(draft, target.n_vocab, eog_ids=target.eog_ids))


def _run(engine, target, prompt, schema, sampling, spec, logprobs=None):
    generation = engine.generate(prompt, sampling, spec, N_TOKENS,
                                 constraint=GrammarConstraint.compile(target, json_schema_grammar(schema)),
                                 logprobs=logprobs)
    events = generation.run()
    return events, "".join(e.text for e in events), generation.stats


@pytest.mark.parametrize("text, schema", CASES, ids=["person", "answer", "any object"])
def test_greedy_json_validates_and_is_identical_with_and_without_speculation(q41_target, q40_draft, text, schema):
    plain, spec = _engines(q41_target, q40_draft)
    prompt = _prompt(q41_target, text)
    a, text_a, _ = _run(plain, q41_target, prompt, schema, SamplingConfig(), SpecConfig(enabled=False), logprobs=3)
    b, text_b, stats = _run(spec, q41_target, prompt, schema, SamplingConfig(), SpecConfig(draft_max=4), logprobs=3)
    assert [e.id for e in a] == [e.id for e in b]
    assert stats.drafted > 0 and stats.accepted > 0  # the draft drafted under its own fork
    for x, y in zip(a, b):  # the same logits (batch-invariant pair): the same figures
        assert x.logprobs.logprob == pytest.approx(y.logprobs.logprob, abs=1e-4)
        assert [t for t, _ in x.logprobs.top] == [t for t, _ in y.logprobs.top]
        assert x.logprobs.top[0][0] == x.id  # greedy: the top allowed token
    if stats.stop_reason.value == "eos":  # ended by the grammar: whole JSON
        jsonschema.validate(json.loads(text_a), schema)
    else:
        assert text_a.startswith("{")


def test_sampled_json_validates_in_both_modes(q41_target, q40_draft):
    plain, spec = _engines(q41_target, q40_draft)
    prompt = _prompt(q41_target, "Describe a person as JSON.")
    ended = 0
    for seed in range(3):
        sampling = SamplingConfig(temperature=0.8, top_k=40, seed=seed)
        for engine, config in ((plain, SpecConfig(enabled=False)), (spec, SpecConfig(draft_max=4))):
            _, text, stats = _run(engine, q41_target, prompt, PERSON, sampling, config)
            if stats.stop_reason.value == "eos":
                jsonschema.validate(json.loads(text), PERSON)
                ended += 1
    assert ended >= 3


def test_sampled_first_tokens_follow_the_constrained_target(q41_target, q40_draft):
    """Temperature 1, top-k 20, under a grammar whose first tokens have choices: the first
    token's frequencies match the constrained target (from its logits), and the first two
    tokens' joint is the same with and without speculation (two-sample chi-square)."""
    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue", "yellow"]}},
              "required": ["colour"]}
    grammar = json_schema_grammar(schema)
    prompt = _prompt(q41_target, "Name a colour, as JSON.")
    sampling = dict(temperature=1.0, top_k=20)
    plain, spec = _engines(q41_target, q40_draft)
    n = 300
    firsts, pairs_plain, pairs_spec = Counter(), Counter(), Counter()
    for seed in range(n):
        g = plain.generate(prompt, SamplingConfig(seed=seed, **sampling), SpecConfig(enabled=False), 7,
                           constraint=GrammarConstraint.compile(q41_target, grammar)).run()
        firsts[g[0].id] += 1
        pairs_plain[tuple(e.id for e in g[5:7])] += 1
        g = spec.generate(prompt, SamplingConfig(seed=10_000 + seed, **sampling), SpecConfig(draft_max=4), 7,
                          constraint=GrammarConstraint.compile(q41_target, grammar)).run()
        pairs_spec[tuple(e.id for e in g[5:7])] += 1
    # The first token's exact constrained distribution, from the target's own logits.
    q41_target.trim(0)
    logits = q41_target.evaluate(prompt, [len(prompt) - 1])[0]
    q41_target.trim(0)
    p = constrained_dist(logits, SamplingConfig(**sampling), GrammarConstraint.compile(q41_target, grammar))
    support = np.flatnonzero(p)
    assert set(firsts) <= set(support.tolist()), "a token outside the constrained target came out"
    if support.size > 1:
        expected = p[support] * n
        observed = np.array([firsts[t] for t in support])
        big = expected >= 5
        assert scistats.chisquare(np.append(observed[big], observed[~big].sum()),
                                  np.append(expected[big], expected[~big].sum())).pvalue > 1e-3
    frequent = [k for k in set(pairs_plain) | set(pairs_spec) if pairs_plain[k] + pairs_spec[k] >= 10]
    table = np.array([[pairs_plain[k] for k in frequent] + [n - sum(pairs_plain[k] for k in frequent)],
                      [pairs_spec[k] for k in frequent] + [n - sum(pairs_spec[k] for k in frequent)]])
    table = table[:, table.sum(axis=0) > 0]
    assert table.shape[1] >= 2, "the colour should vary"
    assert scistats.chi2_contingency(table).pvalue > 1e-3


def test_the_grammar_refuses_what_it_must_and_never_aborts(q41_target):
    constraint = GrammarConstraint.compile(q41_target, json_schema_grammar(ANSWER))
    brace = q41_target.tokenize("{", add_special=False, parse_special=False)[0]
    word = q41_target.tokenize("Hello", add_special=False, parse_special=False)[0]
    eos = next(iter(q41_target.eog_ids))
    ok = constraint.allows(np.array([brace, word, eos], dtype=np.int32))
    assert ok.tolist() == [True, False, False]  # the end of the reply only once the JSON is whole
    with pytest.raises(ConstraintError):
        constraint.advance(word)  # refused in Python, never handed to llama.cpp
    fork = constraint.fork()
    fork.advance(brace)
    assert not fork.allows(np.array([brace], dtype=np.int32))[0]
    assert constraint.allows(np.array([brace], dtype=np.int32))[0]  # the fork is independent
    fork.reset()
    assert fork.allows(np.array([brace], dtype=np.int32))[0]
    mask = allowed_mask(constraint, q41_target.n_vocab)
    assert 0 < mask.sum() < q41_target.n_vocab / 10
    fork.close()
    constraint.close()


def test_tool_call_grammar_forces_a_valid_call(q41_target, q40_draft):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
                 "type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                  "unit": {"enum": ["celsius", "fahrenheit"]}},
                 "required": ["city", "unit"]}}},
             {"type": "function", "function": {"name": "get_time", "parameters": {
                 "type": "object", "properties": {"zone": {"type": "string", "maxLength": 10}}, "required": ["zone"]}}}]
    grammar = tool_call_grammar(tools, suffix="</tool_call>")
    _, spec = _engines(q41_target, q40_draft)
    prompt = _prompt(q41_target, "What is the weather in Paris?")
    events = spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=4), 80,
                           constraint=GrammarConstraint.compile(q41_target, grammar)).run()
    text = "".join(e.text for e in events)
    assert text.endswith("</tool_call>"), text
    call = json.loads(text[:-len("</tool_call>")])
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call["name"] in by_name
    jsonschema.validate(call["arguments"], by_name[call["name"]])


@pytest.mark.parametrize("schema, says", [
    ("not a dict", "must be a JSON object"),
    ({"type": "object", "properties": {"a": {"type": "array", "maxItems": 10 ** 9}}}, "maxItems"),
    ({"type": "string", "pattern": "^a{99999999999}$"}, "repetition"),
    ({"type": "array", "minItems": -1}, "non-negative"),
    ({"$ref": "https://example.com/schema.json"}, "local references"),
    ({"type": "frobnicate"}, "cannot handle"),
    ({"$ref": "#/$defs/missing"}, "cannot handle"),
    ({"type": "string", "pattern": "no anchors"}, "cannot handle"),
])
def test_bad_and_hostile_schemas_are_refused_in_one_line(schema, says):
    with pytest.raises(GrammarError, match=says) as caught:
        json_schema_grammar(schema)
    assert "\n" not in str(caught.value)


def test_huge_and_deep_schemas_are_bounded():
    deep: dict = {"type": "object"}
    for _ in range(200):
        deep = {"type": "object", "properties": {"a": deep}}
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    nested_repeats = {"type": "array", "maxItems": MAX_REPEAT,
                      "items": {"type": "array", "maxItems": MAX_REPEAT, "items": {"type": "string", "maxLength": MAX_REPEAT}}}
    for schema, says in ((deep, "deeper"), (wide, "characters"), (nested_repeats, "")):
        started = time.perf_counter()
        try:
            grammar = json_schema_grammar(schema)
        except GrammarError as exc:
            assert says in str(exc)
        else:
            assert len(grammar) < 300_000
        assert time.perf_counter() - started < 60  # a hang guard, far above the real cost


def test_a_strict_schema_with_keywords_the_grammar_cannot_enforce_is_refused():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}, "required": ["n"]}
    with pytest.raises(GrammarError, match="minimum"):
        json_schema_grammar(schema, strict=True)
    assert json_schema_grammar(schema)  # best effort when not strict
    # A property named like a keyword is a name, not the keyword.
    json_schema_grammar({"type": "object", "properties": {"minimum": {"type": "string"}, "pattern": {"type": "integer"}}},
                        strict=True)
