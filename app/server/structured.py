"""Structured output and log-probabilities over the API: ``response_format`` turned into
the grammar a reply is constrained by, and each token's ``TokenLogprobs`` in OpenAI's
shapes (chat's ``logprobs.content[]``, completions' ``tokens`` / ``token_logprobs`` /
``top_logprobs`` / ``text_offset``)."""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.types import TokenEvent
from app.server.errors import ApiError


def response_grammar(kind: str, schema: dict | None = None, strict: bool = False) -> str:
    """The GBNF for a ``response_format`` of ``kind`` ('' for plain text)."""
    if kind == "text":
        return ""
    # llama.cpp's converter, imported here: the window's side imports the server's request
    # shapes but never llama.cpp (requests are served in the engine process).
    from app.backends.llama.grammar import JSON_OBJECT_SCHEMA, GrammarError, json_schema_grammar

    param = "response_format.json_schema.schema" if kind == "json_schema" else "response_format"
    try:
        return json_schema_grammar(JSON_OBJECT_SCHEMA if kind == "json_object" or schema is None else schema,
                                   strict=strict)
    except GrammarError as exc:
        raise ApiError(400, f"{param}: {exc}", param=param, code="invalid_schema") from None


@dataclass(frozen=True)
class TokenEntry:
    """One emitted token's figures, ready to show: its text, bytes and where it starts."""

    text: str
    raw: bytes
    logprob: float
    top: tuple[tuple[str, bytes, float], ...]
    offset: int  # characters of the reply before this token's text


def token_entry(target, event: TokenEvent, offset: int) -> TokenEntry | None:
    figures = event.logprobs
    if figures is None:
        return None
    raw = target.token_bytes(event.id)
    top = tuple((_shown(target.token_bytes(i)), target.token_bytes(i), lp) for i, lp in figures.top)
    return TokenEntry(_shown(raw), raw, figures.logprob, top, offset)


def chat_logprobs(entries) -> dict:
    return {"content": [{"token": e.text, "logprob": e.logprob, "bytes": list(e.raw),
                         "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(b)} for t, b, lp in e.top]}
                        for e in entries],
            "refusal": None}


def completion_logprobs(entries) -> dict:
    tops = []
    for e in entries:
        top: dict[str, float] = {}
        for text, _raw, lp in e.top:
            top.setdefault(text, lp)  # two tokens that read alike: the likelier one
        tops.append(top)
    return {"tokens": [e.text for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": tops, "text_offset": [e.offset for e in entries]}


def _shown(raw: bytes) -> str:
    """A token's text; bytes of a character it only starts are written as ``\\xNN``."""
    return raw.decode("utf-8", errors="backslashreplace")
