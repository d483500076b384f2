"""Tool calls that parse: the grammar of a reply's calls in the model's own format, with
each call's arguments following its function's ``parameters`` schema, as an engine
``Constraint`` (``app/engine/speculation/constraints.py``) -- the same grammar machinery as
``response_format``, so speculation stays lossless under it.

Two ways to apply it, as llama-server does:

* **forced** (``tool_choice`` "required" or a named function): the whole reply. The
  prompt already began the reply with the format's opening (``ToolPlan.prefill``), so
  the grammar is moved past that text before the first token is sampled.
* **lazy** (``auto``): free text until the reply opens a call -- the format's marker
  (``<tool_call>``, ``[TOOL_CALLS]``...) anywhere, or, for formats that allow a bare
  call, ``{"name"`` opening the reply -- then the grammar from the marker on. A token
  that would open a call the grammar cannot go on with is refused, so the grammar never
  reaches a dead end.

The grammar reads text, not tokens: what it is fed (the prefill, the text from a
marker) goes in byte by byte, through the vocabulary's one-byte tokens.
"""

from __future__ import annotations

import re
import weakref

import numpy as np

from app.backends.llama.grammar import (MAX_GRAMMAR_CHARS, GrammarConstraint, GrammarError, gbnf_literal,
                                        json_schema_grammar, schema_converter)
from app.engine.speculation.constraints import ConstraintError
from app.engine.prompting.tool_calls import ToolFormat

WS = "tc-ws"
_WS_RULE = f'{WS} ::= [ \\t\\n]{{0,4}}'   # bounded: a small model must not write blank lines forever
SEMI, COMMA, NOTHING = '";"', '","', '""'   # what parts two calls in a format
_LEADING = re.compile(rb'[ \t\r\n]*(\{[ \t\r\n]*"name")')


def tool_calls_grammar(fmt: ToolFormat, tools, *, name: str | None = None, parallel: bool = True) -> str:
    """GBNF for one call (or, with ``parallel``, one or more) of ``tools`` (OpenAI's list)
    written in ``fmt``, then the end of the reply. ``name``: only that function."""
    chosen = [t for t in tools if name is None or _function(t)["name"] == name]
    if not chosen:
        raise GrammarError("A tool-call grammar needs at least one tool.")
    converter = schema_converter()
    key = fmt.argument_keys[0]
    alternatives = []
    try:
        for i, tool in enumerate(chosen):
            function = _function(tool)
            parameters = function.get("parameters") or {"type": "object"}
            json_schema_grammar(parameters)  # the bounds and checks a response_format schema gets
            if fmt.name == "functionary":
                rule = converter.visit(converter.resolve_refs(parameters, f"tool{i}"), f"tool{i}-arguments")
                opening = gbnf_literal("<function=" + function["name"] + ">")
                alternatives.append(f'{opening} {rule} "</function>"')
            else:
                schema = {"type": "object", "properties": {"name": {"const": function["name"]}, key: parameters},
                          "required": ["name", key]}
                alternatives.append(converter.visit(converter.resolve_refs(schema, f"tool{i}"), f"tool{i}-call"))
        rules = converter.format_grammar()
    except GrammarError:
        raise
    except Exception as exc:  # noqa: BLE001 — the converter reports with asserts, KeyError, ValueError...
        raise GrammarError(f"The JSON-schema converter cannot handle a tool's parameters: "
                           f"{str(exc).strip()[:200] or type(exc).__name__}") from None
    call = "tc-call ::= " + " | ".join(alternatives)
    def more(sep: str) -> str:  # further calls after the first, each after ``sep``
        if not parallel:
            return ""
        return f"({WS} {sep} {WS} tc-call)*" if fmt.name != "hermes" else f"({WS} tc-tagged)*"
    if fmt.name == "hermes":
        root = (f'root ::= tc-tagged {more("")} {WS} | tc-call {WS}\n'
                f'tc-tagged ::= "<tool_call>" {WS} tc-call {WS} "</tool_call>"')
    elif fmt.name == "llama3":
        root = f'root ::= ("<|python_tag|>" {WS})? tc-call {more(SEMI)} {WS}'
    elif fmt.name == "mistral":
        root = f'root ::= "[TOOL_CALLS]" {WS} "[" {WS} tc-call {more(COMMA)} {WS} "]" {WS}'
    else:  # functionary: one block a call, back to back
        root = f'root ::= tc-call {more(NOTHING)} {WS}'
    grammar = "\n".join([root, call, _WS_RULE, rules])
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"The tools make a grammar of {len(grammar)} characters; at most "
                           f"{MAX_GRAMMAR_CHARS} are allowed (fewer or smaller tools).")
    return grammar


def _function(tool) -> dict:
    function = tool.get("function", tool) if isinstance(tool, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise GrammarError("Each tool needs a function with a name.")
    return function


def tool_constraint(backend, plan, request):
    """The constraint for a reply read by ``plan`` (``engine.prompting.tool_prompt.ToolPlan``) for
    ``request``'s tools (``ToolRequest``): forced or lazy, as the plan says."""
    grammar = tool_calls_grammar(plan.format, request.tools, name=plan.name, parallel=plan.max_calls is None)
    vocab = Vocabulary.of(backend)
    start = GrammarConstraint.compile(backend, grammar)
    if plan.forced:
        prefill = plan.prefill.encode("utf-8")
        if not vocab.feed(start, prefill):
            start.close()
            raise GrammarError("The tool-call grammar does not accept the reply's forced opening.")
        start.replay = lambda constraint: vocab.feed(constraint, prefill)
        return start
    return LazyConstraint(start, vocab, plan.format)


# Each model's Vocabulary, read once (a pass over the whole vocabulary) and gone with the model.
_read: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Vocabulary:
    """Each token's text as llama.cpp's grammar reads it (control tokens included), and
    a one-byte token for every byte, to feed the grammar text. Read once per model."""

    def __init__(self, backend) -> None:
        self.pieces = [backend.token_piece(t) for t in range(backend.n_vocab)]
        self.eog = frozenset(getattr(backend, "eog_ids", ()))
        self.byte_token: dict[int, int] = {}
        for token, piece in enumerate(self.pieces):
            if len(piece) == 1 and token not in self.eog:
                self.byte_token.setdefault(piece[0], token)
        self._ending: dict[bytes, np.ndarray] = {}

    @classmethod
    def of(cls, backend) -> "Vocabulary":
        vocab = _read.get(backend)
        if vocab is None:
            vocab = _read[backend] = cls(backend)
        return vocab

    def holding(self, chars: bytes) -> np.ndarray:
        """One bool per token: does its text hold any of ``chars``?"""
        mask = self._ending.get(chars)
        if mask is None:
            mask = self._ending[chars] = np.array([any(c in p for c in chars) for p in self.pieces], dtype=bool)
        return mask

    def feed(self, constraint: GrammarConstraint, data: bytes) -> bool:
        """Advance ``constraint`` through ``data``; False (part fed) where it refuses."""
        for byte in data:
            token = self.byte_token.get(byte)
            if token is None or not constraint.allows(np.array([token], dtype=np.int32))[0]:
                return False
            constraint.advance(token)
        return True


class LazyConstraint:
    """Free until the reply opens a call, then ``start``'s grammar (see the module)."""

    def __init__(self, start: GrammarConstraint, vocab: Vocabulary, fmt: ToolFormat, *, owner: bool = True) -> None:
        self.start, self.vocab, self.fmt, self.owner = start, vocab, fmt, owner
        self.n_vocab = start.n_vocab
        self.markers = tuple(m.encode("utf-8") for m in fmt.markers)
        self.longest = max(len(m) for m in self.markers)
        # A token can open a call only if its text ends a marker or '{"name"'.
        ends = bytes({m[-1] for m in self.markers} | ({ord('"')} if fmt.leading_json else set()))
        self.can_open = vocab.holding(ends)
        self.text = b""          # the reply so far, while no call is open
        self.inner: GrammarConstraint | None = None

    def _opening(self, text: bytes, before: int) -> int | None:
        """Where a call opens in ``text`` (none did in its first ``before`` bytes)."""
        found = [i for m in self.markers if (i := text.find(m, max(0, before - self.longest))) >= 0]
        if self.fmt.leading_json:
            match = _LEADING.match(text)
            if match:
                found.append(match.start(1))
        return min(found) if found else None

    def _could_open(self, token: int) -> bool:
        """Whether ``token`` may be written now: it opens no call, or one the grammar can go on with."""
        new = self.text + self.vocab.pieces[token]
        at = self._opening(new, len(self.text))
        if at is None:
            return True
        trial = self.start.fork()
        try:
            return self.vocab.feed(trial, new[at:])
        finally:
            trial.close()

    def allows(self, tokens: np.ndarray) -> np.ndarray:
        if self.inner is not None:
            return self.inner.allows(tokens)
        tokens = np.asarray(tokens)
        ok = np.ones(len(tokens), dtype=bool)
        inside = tokens < len(self.can_open)
        # While the reply is still blank or only '{...' it may yet become a bare call: check every token.
        early = self.fmt.leading_json and len(self.text.strip(b" \t\r\n")) < 8
        check = np.flatnonzero(inside) if early else np.flatnonzero(inside & self.can_open[np.where(inside, tokens, 0)])
        for i in check:
            ok[i] = self._could_open(int(tokens[i]))
        return ok

    def advance(self, token: int) -> None:
        token = int(token)
        if self.inner is not None:
            self.inner.advance(token)
            return
        if not 0 <= token < self.n_vocab or not self.allows(np.array([token], dtype=np.int32))[0]:
            raise ConstraintError(f"The tool-call grammar does not allow token {token} here.")
        new = self.text + self.vocab.pieces[token]
        at = self._opening(new, len(self.text))
        if at is None:
            self.text = new
            return
        inner = self.start.fork()
        self.vocab.feed(inner, new[at:])  # known to pass: allows() just checked it
        self.inner, self.text = inner, b""

    def fork(self) -> "LazyConstraint":
        clone = LazyConstraint(self.start, self.vocab, self.fmt, owner=False)
        clone.text = self.text
        clone.inner = self.inner.fork() if self.inner is not None else None
        return clone

    def reset(self) -> None:
        if self.inner is not None:
            self.inner.close()
        self.inner, self.text = None, b""

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
            self.inner = None
        if self.owner:
            self.start.close()
