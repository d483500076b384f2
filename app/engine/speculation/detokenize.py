"""Token bytes -> text, for a stream where one character may span several tokens."""

from __future__ import annotations

import codecs
from typing import Callable


class StreamingDetokenizer:
    """Buffers incomplete UTF-8 so each finished character goes with the token that completed it."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._decoder.decode(self._token_bytes(token_id))

    @property
    def pending(self) -> bool:
        """Whether part of a character waits for the next token's bytes."""
        return bool(self._decoder.getstate()[0])

    def flush(self) -> str:
        """Whatever an unfinished character left behind, as replacement characters."""
        return self._decoder.decode(b"", final=True)


def token_display_text(token_bytes: bytes) -> str:
    """A single token's text on its own, for tooltips (a partial character shows as U+FFFD)."""
    return token_bytes.decode("utf-8", errors="replace")


_SHOWN = str.maketrans({"\n": "↵", "\t": "⇥", "\r": "␍"})


def visible(text: str) -> str:
    """A token's text as a reader can see it: quoted, so its edges show, with line
    breaks, tabs and carriage returns drawn as glyphs."""
    return f"“{text.translate(_SHOWN)}”"
