"""The root of every error Tandem reports to a user.

Each package defines its own subclasses; anything derived from ``TandemError``
carries a one-line message fit to show as is (no traceback). Also here, a leaf both
sides read: llama.cpp's last words from a dead child's stderr, in one line (the backends'
children, and the engine process whose death the window explains).
"""

import re


class TandemError(Exception):
    """An expected failure with a message written for the user."""


def one_line(exc: BaseException) -> str:
    """A message fit for a user: a TandemError's own words, otherwise type and first line."""
    if isinstance(exc, TandemError):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"Unexpected error: {type(exc).__name__}" + (f": {text[0]}" if text else "")


_SOURCE_PATH = re.compile(r"^\S*?([^/\\\s]+\.(?:c|cc|cpp|h|cu|m)):(\d+): ")


def last_words(lines) -> str:
    """llama.cpp's own account of its death, one line: the failed assert, the uncaught
    exception, or else the last thing it said."""
    lines = list(lines)
    for line in reversed(lines):
        if "GGML_ASSERT" in line or "GGML_ABORT" in line or ": fatal error" in line:
            return _clip(_SOURCE_PATH.sub(r"\1:\2: ", line))
    for i, line in enumerate(lines):
        if line.startswith("terminate called after throwing an instance of"):
            kind = line.rsplit(" ", 1)[-1].strip("'")
            what = next((rest.split("what():", 1)[1].strip() for rest in lines[i + 1:i + 3]
                         if "what():" in rest), "")
            return _clip(f"uncaught {kind}" + (f" ({what})" if what else ""))
    meaningful = [line for line in lines if not line.startswith("#")]
    return _clip(meaningful[-1]) if meaningful else ""


def _clip(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
