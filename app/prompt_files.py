"""Reading JSONL prompt files (``generate --prompts``, ``bench --prompts``) with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, TypeVar

from app.errors import TandemError

T = TypeVar("T")


def read_jsonl(path: Path, parse: Callable[[dict], T], *, error: type[TandemError], expected: str) -> list[T]:
    """``parse`` each non-empty line's JSON object; a bad line names its number and what was expected."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise error(f"Cannot read {path}: {exc.strerror or exc}") from None
    items = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(parse(json.loads(line)))
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            raise error(f"{path}:{number}: expected {expected}") from None
    return items
