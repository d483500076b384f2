"""What the last scan found, so the next one reads only files that changed.

A JSON file in Tandem's cache folder: ``{"version": 2, "entries": [entry, ...]}``,
each entry keyed by its file's path, size and modification time (every part of a
split model). It is read as someone else's file (``safe_json``: a regular file of
bounded size, no deep nesting); an entry that does not read back as written is
dropped and its file read again, and a cache that cannot be read or written only
costs a full scan.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.library.entries import LibraryEntry
from app.storage import paths
from app.storage.files import atomic_write_text
from app.storage.safe_json import UnreadableFile, loads_lenient, read_regular_file

CACHE_NAME = "model-library.json"
CACHE_VERSION = 2  # 2: notes say whether a target's MTP head drafts (read every file again)
MAX_CACHE_BYTES = 16 << 20  # ~600 bytes an entry: tens of thousands of models


def cache_file() -> Path:
    return paths.cache_dir() / CACHE_NAME


def load_cache(path: Path | None = None) -> dict[str, LibraryEntry]:
    """Remembered entries by path; {} when there is no usable cache."""
    try:
        path = cache_file() if path is None else path
        document = loads_lenient(read_regular_file(path, MAX_CACHE_BYTES).decode("utf-8"))
    except (OSError, UnreadableFile, ValueError):  # missing, odd, not UTF-8, not JSON
        return {}
    if not isinstance(document, dict) or document.get("version") != CACHE_VERSION \
            or not isinstance(document.get("entries"), list):
        return {}
    remembered: dict[str, LibraryEntry] = {}
    for item in document["entries"]:
        try:
            entry = LibraryEntry.from_dict(item)
        except (ValueError, TypeError):
            continue  # read again by the scan
        remembered[entry.path] = entry
    return remembered


def save_cache(entries: list[LibraryEntry], path: Path | None = None) -> None:
    """Best effort: a cache that cannot be written means reading the files again next time."""
    # ensure_ascii: a non-UTF-8 file name (surrogateescape) travels as \\u escapes.
    text = json.dumps({"version": CACHE_VERSION, "entries": [e.to_dict() for e in entries]}, ensure_ascii=True)
    if len(text) > MAX_CACHE_BYTES:
        return
    try:
        atomic_write_text(cache_file() if path is None else path, text)
    except (OSError, ValueError):
        pass
