"""Reading JSONL prompt files (``generate --prompts``, ``bench --prompts``) with one-line errors."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Callable, TypeVar

from app.errors import TandemError

T = TypeVar("T")
MAX_BYTES = 64 * 2**20  # a prompt file is text someone wrote; past this it is something else


def read_jsonl(path: Path, parse: Callable[[dict], T], *, error: type[TandemError], expected: str) -> list[T]:
    """``parse`` each non-empty line's JSON object; a bad line names its number and what was expected.

    ``parse`` may raise ValueError (a wrong value) as well as KeyError/TypeError (a missing or
    mistyped field): each becomes the same one-line error.
    """
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end
            raise error(f"{path} is not a regular file")
        if info.st_size > MAX_BYTES:
            raise error(f"{path} is {info.st_size / 2**20:.0f} MiB; a prompt file may hold at most "
                        f"{MAX_BYTES // 2**20} MiB")
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise error(f"Cannot read {path}: {exc.strerror or exc}") from None
    items = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise TypeError("not an object")
            items.append(parse(record))
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):
            raise error(f"{path}:{number}: expected {expected}") from None
    return items


def text_field(value: object) -> str:
    """A prompt's text: a string that is valid Unicode (no lone surrogates from ``\\ud800``)."""
    if not isinstance(value, str):
        raise TypeError("not a string")
    value.encode("utf-8")  # UnicodeEncodeError is a ValueError
    return value


def seed_field(value: object) -> int | None:
    """A seed in the setting's declared range (-1 or absent: a new one each run)."""
    from app.storage.settings import number_range

    if value is None:
        return None
    bounds = number_range("seed")
    if isinstance(value, bool) or not isinstance(value, int) or not bounds.low <= value <= bounds.high:
        raise ValueError("not a seed")
    return None if value == -1 else value
