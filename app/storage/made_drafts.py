"""The drafts Tandem made from a target (``tandem make-draft``), remembered per target.

They live in the data folder (``paths.drafts_dir()``); this file, ``made-drafts.json``
beside them, says which target each was made from and how: ``{"version": 1, "drafts":
[{"target", "target_size", "target_mtime_ns", "draft", "variant", "layers", "made"}]}``.
A draft whose target has changed since (another size or time) or whose file is gone is
not offered. The file is read as someone else's (``safe_json``): a damaged one only
forgets, and is rewritten whole (temp file + ``os.replace``) on the next make.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from app.storage import paths
from app.storage.files import atomic_write_text
from app.storage.safe_json import UnreadableFile, loads_lenient, read_regular_file

FILE_NAME = "made-drafts.json"
VERSION = 1
MAX_BYTES = 4 << 20
MAX_REMEMBERED = 512


@dataclass(frozen=True)
class MadeDraft:
    target: str
    target_size: int
    target_mtime_ns: int
    draft: str
    variant: str
    layers: int | None   # layers kept; None: all of them
    made: str

    @property
    def current(self) -> bool:
        """The draft still exists and its target is the file it was made from."""
        try:
            stat = os.stat(self.target)
            return Path(self.draft).is_file() and (stat.st_size, stat.st_mtime_ns) == (
                self.target_size, self.target_mtime_ns)
        except OSError:
            return False


def registry_file() -> Path:
    return paths.drafts_dir() / FILE_NAME


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fsdecode(path))


def _load(path: Path) -> list[MadeDraft]:
    try:
        document = loads_lenient(read_regular_file(path, MAX_BYTES).decode("utf-8"))
    except (OSError, UnreadableFile, ValueError):
        return []
    if not isinstance(document, dict) or document.get("version") != VERSION:
        return []
    items = document.get("drafts")
    kept = []
    for item in items if isinstance(items, list) else ():
        try:
            made = MadeDraft(**item)
        except TypeError:
            continue
        if all(isinstance(getattr(made, f), str) for f in ("target", "draft", "variant", "made")) \
                and all(type(getattr(made, f)) is int for f in ("target_size", "target_mtime_ns")) \
                and (made.layers is None or type(made.layers) is int):
            kept.append(made)
    return kept


def remember(target: str | os.PathLike[str], draft: str | os.PathLike[str], variant: str,
             layers: int | None) -> MadeDraft:
    """Note that ``draft`` was made from ``target`` (the newest goes first)."""
    stat = os.stat(target)
    made = MadeDraft(_key(target), stat.st_size, stat.st_mtime_ns, _key(draft), variant, layers,
                     time.strftime("%Y-%m-%d %H:%M:%S"))
    path = registry_file()
    others = [d for d in _load(path) if d.draft != made.draft]
    drafts = [made, *others][:MAX_REMEMBERED]
    atomic_write_text(path, json.dumps({"version": VERSION, "drafts": [asdict(d) for d in drafts]}, indent=1))
    return made


def made_for(target: str | os.PathLike[str]) -> list[MadeDraft]:
    """The current drafts made from ``target``, newest first."""
    key = _key(target)
    return [d for d in _load(registry_file()) if d.target == key and d.current]


def find_made(target: str | os.PathLike[str], variant: str, layers: int | None) -> MadeDraft | None:
    """A current draft of ``target`` made exactly so, if there is one."""
    return next((d for d in made_for(target) if d.variant == variant and d.layers == layers), None)
