"""llama.cpp's grammar as an engine ``Constraint`` (app/engine/speculation/constraints.py), and JSON
schemas turned into that grammar (GBNF) by llama-cpp-python's converter.

It lives in the llama package because it calls llama.cpp itself (the sampler API and
llama-cpp-python's schema converter).

The grammar sampler is used as an oracle only: ``llama_sampler_apply`` on a set of
candidate ids marks those the grammar refuses (logit -inf); ``llama_sampler_accept``
moves it on; ``llama_sampler_clone`` forks it for drafting. The engine decides what
to sample. Accepting a token the grammar refuses makes llama.cpp throw through its C
API (the process would abort), so ``advance`` checks first, always.

Schemas come from clients, so they are bounded before the converter sees them (size,
depth, repetition counts, regex quantifiers) and after (the grammar's length): a
hostile schema is refused in well under a second instead of hanging the server.
"""

from __future__ import annotations

import ctypes
import json
import re

import llama_cpp as ll
import numpy as np

from app.backends.llama import log_capture
from app.engine.speculation.constraints import ConstraintError
from app.engine.errors import EngineError

MAX_SCHEMA_CHARS = 64 * 1024   # the schema as compact JSON
MAX_SCHEMA_DEPTH = 32          # nested objects and arrays
MAX_REPEAT = 1000              # minItems / maxItems / minLength / maxLength, regex {m,n}
MAX_GRAMMAR_CHARS = 256 * 1024

_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])  # llama_token_data
_REPEAT_KEYS = ("minItems", "maxItems", "minLength", "maxLength")
_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")
# Keywords the converter does not enforce: a strict schema using one is refused, since
# the reply could not be promised to validate (a non-strict one is best effort).
_NOT_ENFORCED = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems",
                 "minProperties", "maxProperties", "patternProperties", "propertyNames", "dependentRequired",
                 "dependentSchemas", "dependencies", "if", "then", "else", "not", "contains", "minContains",
                 "maxContains", "unevaluatedProperties", "unevaluatedItems")
_DATA_KEYS = ("enum", "const", "default", "examples", "required")
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_FORMATS = ("date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5")


class GrammarError(EngineError):
    """A grammar or schema that cannot constrain a reply; the message says why, in one line."""


# -- the constraint ---------------------------------------------------------------------
class GrammarConstraint:
    """A llama.cpp grammar over one model's vocabulary, in some state."""

    def __init__(self, sampler, n_vocab: int, buffer: np.ndarray | None = None) -> None:
        self._sampler = sampler
        self.n_vocab = n_vocab
        # One candidate buffer for a constraint and its forks (they run on one thread).
        self._buffer = buffer if buffer is not None else np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._array = ll.llama_token_data_array()
        # What ``reset`` feeds again after the grammar's start (a forced reply's opening,
        # tool_grammar.py): the constraint's start state is the one it was handed over in.
        self.replay = None

    @classmethod
    def compile(cls, backend, grammar: str) -> "GrammarConstraint":
        """``grammar`` (GBNF, its start rule ``root``) over ``backend``'s vocabulary."""
        if len(grammar) > MAX_GRAMMAR_CHARS:
            raise GrammarError(f"The grammar is {len(grammar)} characters; at most {MAX_GRAMMAR_CHARS} are allowed.")
        log_capture.clear_errors()
        sampler = ll.llama_sampler_init_grammar(backend.vocab_handle, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise GrammarError(f"llama.cpp could not parse the grammar ({log_capture.last_error()}).")
        return cls(sampler, backend.n_vocab)

    def allows(self, tokens: np.ndarray) -> np.ndarray:
        n = len(tokens)
        if n == 0:
            return np.zeros(0, dtype=bool)
        if n > self._buffer.size:
            raise ValueError("more candidates than the vocabulary holds")
        buf = self._buffer[:n]
        buf["id"] = tokens
        buf["logit"] = 0.0
        array = self._array
        array.data = ctypes.cast(buf.ctypes.data, ll.llama_token_data_p)
        array.size = n
        array.selected = -1
        array.sorted = False
        ll.llama_sampler_apply(self._sampler, ctypes.byref(array))
        return buf["logit"] == 0.0  # refused ones are set to -inf

    def advance(self, token: int) -> None:
        token = int(token)
        if not 0 <= token < self.n_vocab or not self.allows(np.array([token], dtype=np.int32))[0]:
            raise ConstraintError(f"The grammar does not allow token {token} here.")
        ll.llama_sampler_accept(self._sampler, token)

    def fork(self) -> "GrammarConstraint":
        clone = ll.llama_sampler_clone(self._sampler)
        if not clone:
            raise GrammarError("llama.cpp could not copy the grammar's state.")
        forked = GrammarConstraint(clone, self.n_vocab, self._buffer)
        forked.replay = self.replay
        return forked

    def reset(self) -> None:
        ll.llama_sampler_reset(self._sampler)
        if self.replay is not None:
            self.replay(self)

    def close(self) -> None:
        if self._sampler:
            ll.llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self) -> None:  # a safety net: a reply's constraint goes with its generation
        try:
            self.close()
        except Exception:
            pass


# -- JSON schemas -------------------------------------------------------------------------
JSON_OBJECT_SCHEMA: dict = {"type": "object"}


def json_schema_grammar(schema, *, strict: bool = False) -> str:
    """GBNF that only JSON valid against ``schema`` (a dict) matches. Raises GrammarError,
    one line, for a schema that is malformed, too big, or one the converter cannot handle."""
    if not isinstance(schema, dict):
        raise GrammarError("The schema must be a JSON object.")
    try:
        text = json.dumps(schema, separators=(",", ":"), allow_nan=False)
    except (ValueError, RecursionError):
        raise GrammarError("The schema is not plain JSON (or is nested too deeply).") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise GrammarError(f"The schema is {len(text)} characters as JSON; at most {MAX_SCHEMA_CHARS} are allowed.")
    _check_bounds(schema, strict)
    converter = schema_converter()
    try:
        resolved = converter.resolve_refs(schema, "input")
        converter.visit(resolved, "")
        grammar = converter.format_grammar()
    except Exception as exc:  # noqa: BLE001 — the converter reports with asserts, KeyError, ValueError...
        raise GrammarError(f"The JSON-schema converter cannot handle this schema: {_one_line(exc)}") from None
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"The schema makes a grammar of {len(grammar)} characters; at most "
                           f"{MAX_GRAMMAR_CHARS} are allowed (fewer or shorter repetitions).")
    return grammar


def schema_converter():
    """A fresh converter of JSON schemas to GBNF (llama-cpp-python's), set up as every
    grammar of Tandem's uses it: a client's schema never makes the server fetch a remote
    ``$ref``."""
    return ll.llama_grammar.SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def tool_call_grammar(tools, *, arguments_key: str = "arguments", suffix: str = "") -> str:
    """GBNF forcing one call of one of ``tools``: ``{"name": <a tool's name>,
    "<arguments_key>": <JSON valid against that tool's parameters>}``, then ``suffix``
    verbatim (e.g. ``"</tool_call>"``), then the end of the reply. ``tools``: OpenAI's
    list (``{"type": "function", "function": {"name", "parameters"}}``) or one such
    ``function`` object."""
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not tools:
        raise GrammarError("A tool-call grammar needs at least one tool.")
    calls = []
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise GrammarError("Each tool needs a function with a name.")
        parameters = function.get("parameters") or {"type": "object"}
        calls.append({"type": "object", "properties": {"name": {"const": function["name"]}, arguments_key: parameters},
                      "required": ["name", arguments_key]})
    grammar = json_schema_grammar(calls[0] if len(calls) == 1 else {"anyOf": calls})
    if not suffix:
        return grammar
    # The converter names its start rule root; it becomes the call, followed by the suffix.
    lines = grammar.split("\n")
    lines = [("tool-call-root ::= " + line[len("root ::= "):]) if line.startswith("root ::= ") else line
             for line in lines]
    return "\n".join([f"root ::= tool-call-root {gbnf_literal(suffix)}", *lines])


def gbnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def _check_bounds(schema: dict, strict: bool) -> None:
    """Walk the schema (without recursion: its depth is what is being checked)."""
    stack = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise GrammarError(f"The schema nests deeper than {MAX_SCHEMA_DEPTH} levels.")
        if isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        for key in _REPEAT_KEYS:
            if key in node:
                value = node[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise GrammarError(f"{key} must be a non-negative integer.")
                if value > MAX_REPEAT:
                    raise GrammarError(f"{key} is {value}; at most {MAX_REPEAT} can be enforced.")
        pattern = node.get("pattern")
        if pattern is not None:
            if not isinstance(pattern, str):
                raise GrammarError("pattern must be a string.")
            for low, high in _QUANTIFIER.findall(pattern):
                if any(len(n) > 4 or int(n) > MAX_REPEAT for n in (low, high) if n):
                    raise GrammarError(f"A repetition in pattern {pattern[:40]!r} exceeds {MAX_REPEAT}.")
        ref = node.get("$ref")
        if ref is not None and (not isinstance(ref, str) or not ref.startswith("#/")):
            raise GrammarError("Only local references ($ref starting with '#/') are supported.")
        if strict:
            used = [key for key in _NOT_ENFORCED if key in node]
            if node.get("format") is not None and node.get("format") not in _FORMATS:
                used.append(f"format {node['format']!r}")
            if used:
                raise GrammarError(f"A strict schema uses {', '.join(used)}, which the grammar cannot enforce.")
        for key, value in node.items():
            if key in _DATA_KEYS:
                continue  # values, not schemas (their size is bounded with the whole)
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                stack.extend((sub, depth + 1) for sub in value.values())  # keys are names
            elif isinstance(value, (dict, list)):
                stack.append((value, depth + 1))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    message = text[0] if text else type(exc).__name__
    return message[:300]
