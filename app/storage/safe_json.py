"""Reading JSON that someone else may have written: files checked before they are read,
and values no setting needs (deep nesting, numbers of thousands of digits) kept out.

``json.loads`` raises ``RecursionError`` on a 100,000-deep array and ``ValueError`` on
a 5,000-digit integer, and knows nothing of where one bad value ends: the whole
document is lost. ``loads_lenient`` parses iteratively and puts a ``Refused`` marker in
place of just the value that went too deep or too long, so the rest of the document
keeps its values. It is plain Python, for small files (settings), not for big exports.
"""

from __future__ import annotations

import os
import re
import stat
from json import JSONDecodeError
from json.decoder import scanstring
from pathlib import Path
from typing import Any

MAX_DEPTH = 32
MAX_DIGITS = 100  # no setting needs a longer number; int() of 5,000 digits raises


class Refused:
    """Stands where a value was left out; says why when shown."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"<{self.why}>"


class UnreadableFile(Exception):
    """The path is not a regular file of acceptable size (reason in the message)."""


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes``.

    Opened without blocking and judged by ``fstat`` of what was opened, so a FIFO (which
    would block until a writer came) or a link to ``/dev/zero`` (which never ends) is
    refused at once, and a file swapped in between a check and the read cannot slip by.
    Raises FileNotFoundError, OSError, or UnreadableFile."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile("not a regular file")
        if info.st_size > max_bytes:
            raise UnreadableFile(f"{info.st_size:,} bytes, over the limit of {max_bytes:,}")
        chunks, size = [], 0
        while True:  # read to the end, but never past the limit (the file may be growing)
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise UnreadableFile(f"over the limit of {max_bytes:,} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_BRACKET_OR_QUOTE = re.compile(r'["\[\]{}]')
_CONSTANTS = {"true": True, "false": False, "null": None,
              "NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def loads_lenient(text: str, *, max_depth: int = MAX_DEPTH, max_digits: int = MAX_DIGITS) -> Any:
    """Parse JSON like ``json.loads``, without recursion; a container nested deeper than
    ``max_depth`` or a number longer than ``max_digits`` becomes a ``Refused``. Raises
    JSONDecodeError for text that is not JSON."""
    stack: list[list] = []  # [container, key of the value being parsed (objects)]
    pos = _skip(text, 0)
    while True:
        # One value starts at pos: a scalar, or a container that may be empty.
        char = text[pos:pos + 1]
        if char in ("[", "{"):
            if len(stack) >= max_depth:
                pos = _skip_container(text, pos)
                value: Any = Refused(f"nested more than {max_depth} deep")
            else:
                container: Any = [] if char == "[" else {}
                pos = _skip(text, pos + 1)
                if text.startswith("]" if char == "[" else "}", pos):
                    pos, value = pos + 1, container
                else:
                    stack.append([container, None])
                    if char == "{":
                        stack[-1][1], pos = _key(text, pos)
                    continue
        elif char == '"':
            value, pos = scanstring(text, pos + 1, True)
        else:
            value, pos = _scalar(text, pos, max_digits)
        # Put it in its container; close every container that ends here.
        while True:
            pos = _skip(text, pos)
            if not stack:
                if pos != len(text):
                    raise JSONDecodeError("Extra data", text, pos)
                return value
            container, key = stack[-1]
            if isinstance(container, list):
                container.append(value)
            else:
                container[key] = value
            if text.startswith(",", pos):
                pos = _skip(text, pos + 1)
                if isinstance(container, dict):
                    stack[-1][1], pos = _key(text, pos)
                break
            if text.startswith("]" if isinstance(container, list) else "}", pos):
                stack.pop()
                pos, value = pos + 1, container
                continue
            raise JSONDecodeError("Expecting ',' delimiter", text, pos)
        pos = _skip(text, pos)


def _skip(text: str, pos: int) -> int:
    return _WHITESPACE.match(text, pos).end()


def _key(text: str, pos: int) -> tuple[str, int]:
    if not text.startswith('"', pos):
        raise JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
    key, pos = scanstring(text, pos + 1, True)
    pos = _skip(text, pos)
    if not text.startswith(":", pos):
        raise JSONDecodeError("Expecting ':' delimiter", text, pos)
    return key, _skip(text, pos + 1)


def _scalar(text: str, pos: int, max_digits: int) -> tuple[Any, int]:
    match = _NUMBER.match(text, pos)
    if match:
        number = match.group()
        if len(number) > max_digits:
            return Refused(f"a number of {len(number):,} characters"), match.end()
        if match.group(1) or match.group(2):
            return float(number), match.end()  # too big a float is inf: the checks refuse it
        return int(number), match.end()
    for word, value in _CONSTANTS.items():
        if text.startswith(word, pos):
            return value, pos + len(word)
    raise JSONDecodeError("Expecting value", text, pos)


def _skip_container(text: str, pos: int) -> int:
    """The end of the container starting at ``pos``, found without building it."""
    depth = 0
    while True:
        match = _BRACKET_OR_QUOTE.search(text, pos)
        if match is None:
            raise JSONDecodeError("Unterminated array or object", text, pos)
        char, pos = match.group(), match.end()
        if char == '"':
            _, pos = scanstring(text, pos, True)
        elif char in "[{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return pos
