"""llama.cpp's built-in chat formats (``llama_chat_builtin_templates``): their names, and
messages rendered in one of them (``llama_chat_apply_template``).

A model whose own template cannot be used is prompted in one of these
(``app.engine.prompting.chat_formats`` decides which); the list is llama.cpp's, so it is
asked for, not copied, and a build that adds a format is offered it. Rendering needs no
model; NULs in contents travel as a marker, since llama.cpp's messages are C strings.
"""

from __future__ import annotations

import ctypes
import secrets
from typing import Sequence

import llama_cpp as ll

from app.engine.errors import ChatTemplateError

_format_names: tuple[str, ...] | None = None


def chat_format_names() -> tuple[str, ...]:
    """The names of llama.cpp's built-in chat formats (``llama_chat_builtin_templates``)."""
    global _format_names
    if _format_names is None:
        count = ll.llama_chat_builtin_templates(None, 0)
        names = (ctypes.c_char_p * max(count, 1))()
        ll.llama_chat_builtin_templates(names, count)
        _format_names = tuple(sorted(n.decode("utf-8") for n in names[:count] if n))
    return _format_names


def render_chat_format(name: str, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
    """``messages`` in llama.cpp's built-in format ``name`` (``llama_chat_apply_template``).

    Its messages are C strings: a NUL in a content would end it there, so NULs travel
    as a marker that cannot occur in the text and come back after."""
    texts = [tuple(v if isinstance(v, str) else "" for v in (m.get("role"), m.get("content"))) for m in messages]
    nul = ""
    if any("\0" in text for pair in texts for text in pair):
        while not nul or any(nul in text for pair in texts for text in pair):
            nul = f"\ue002{secrets.token_hex(8)}\ue003"
    keep = [tuple((t.replace("\0", nul) if nul else t).encode("utf-8", "replace") for t in pair) for pair in texts]
    chat = (ll.llama_chat_message * max(len(keep), 1))()
    for i, (role, content) in enumerate(keep):
        chat[i].role, chat[i].content = role, content
    size = sum(len(r) + len(c) for r, c in keep) * 2 + 256
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = ll.llama_chat_apply_template(name.encode("utf-8"), chat, len(keep), add_generation_prompt, buf, size)
        if n < 0:
            raise ChatTemplateError(f"llama.cpp has no chat format called '{name}'")
        if n <= size:
            text = buf.raw[:n].decode("utf-8", "replace")
            return text.replace(nul, "\0") if nul else text
        size = n + 1
    raise ChatTemplateError(f"llama.cpp's '{name}' format could not be rendered")
