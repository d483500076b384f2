"""What a grammar costs per token: llama.cpp's grammar checked over the whole vocabulary
(the full mask) and over the few candidates the engine usually asks about, for a JSON
schema (``response_format``) and for tool calls (``app/backends/tool_grammar.py``:
forced, and ``auto`` before and inside a call).

    python tools/grammar_cost.py [--target GGUF] [--repeat N]

Prints milliseconds per call; nothing is asserted (figures from a loaded machine are
noise: run it on a quiet one). Without --target it uses the demo target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.backends.llama.grammar import GrammarConstraint, json_schema_grammar  # noqa: E402
from app.backends.llama.backend import LlamaBackend  # noqa: E402
from app.backends.tool_grammar import tool_constraint  # noqa: E402
from app.engine.prompting.tool_calls import HERMES  # noqa: E402
from app.engine.prompting.tool_prompt import ToolPlan, ToolRequest  # noqa: E402
from app.engine.speculation.constraints import allowed_mask, constrained_argmax, constrained_dist  # noqa: E402
from app.engine.types import SamplingConfig  # noqa: E402

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "tags"]}
# A state inside a string (the most permissive: nearly every token is allowed) and one
# at a structural point (few are).
PREFIXES = {"inside a string": '{"name": "Ada Lov', "after a value": '{"name": "Ada", '}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"]}}}
# Tool calls: (forced?, the reply so far).
TOOL_STATES = {"tool call forced, inside the arguments": (True, ' {"city": "Par'),
               "tool call auto, free text before any call": (False, "The weather in Paris is"),
               "tool call auto, inside a call": (False, 'Let me check. <tool_call>\n{"name": "get_weather", '
                                                        '"arguments": {"city": "Par')}


def _constraints(model):
    """(label, a constraint in the state that label names)."""
    grammar = json_schema_grammar(SCHEMA)
    for label, prefix in PREFIXES.items():
        constraint = GrammarConstraint.compile(model, grammar)
        for token in model.tokenize(prefix, add_special=False, parse_special=False):
            constraint.advance(token)
        yield "JSON schema, " + label, constraint
    request = ToolRequest((WEATHER,), "auto", "get_weather")
    for label, (forced, prefix) in TOOL_STATES.items():
        plan = ToolPlan(HERMES, HERMES.opening("get_weather") if forced else "", 1, forced,
                        "get_weather" if forced else None)
        constraint = tool_constraint(model, plan, request if forced else ToolRequest((WEATHER,)))
        for token in model.tokenize(prefix, add_special=False, parse_special=True):
            constraint.advance(token)
        yield label, constraint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    if args.target is None:
        from app.models.demo import demo_pair
        args.target = demo_pair().target
    model = LlamaBackend(args.target, n_ctx=512)
    rng = np.random.default_rng(0)
    print(f"{model.name}: vocabulary {model.n_vocab}; times per call, median of {args.repeat}")
    for label, constraint in _constraints(model):
        logits = model.evaluate(model.tokenize("Hello", add_special=True, parse_special=False), [0])[0]
        model.trim(0)
        figures = {
            "full mask (every token)": lambda: allowed_mask(constraint, model.n_vocab),
            "one candidate": lambda: constraint.allows(np.array([int(rng.integers(model.n_vocab))], dtype=np.int32)),
            "64 candidates": lambda: constraint.allows(rng.integers(model.n_vocab, size=64).astype(np.int32)),
            "greedy choice (constrained_argmax)": lambda: constrained_argmax(logits, constraint),
            "sampled, top-k 40": lambda: constrained_dist(logits, SamplingConfig(temperature=0.8, top_k=40), constraint),
            "sampled, temperature only": lambda: constrained_dist(logits, SamplingConfig(temperature=0.8), constraint),
            "fork + advance + close": lambda: _fork_advance(constraint),
        }
        allowed = int(allowed_mask(constraint, model.n_vocab).sum())
        print(f"\n{label} ({allowed} of {model.n_vocab} tokens allowed):")
        for name, call in figures.items():
            print(f"  {name:38s} {_median_ms(call, args.repeat):8.3f} ms")
        constraint.close()
    model.close()


def _fork_advance(constraint) -> None:
    fork = constraint.fork()
    ok = np.flatnonzero(fork.allows(np.arange(256, dtype=np.int32)))
    if ok.size:
        fork.advance(int(ok[0]))
    fork.close()


def _median_ms(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


if __name__ == "__main__":
    main()
