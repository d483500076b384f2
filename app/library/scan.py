"""A scan of the model library: every place looked through, each GGUF file described
from its header, the cache consulted first.

Meant to run off the UI thread: ``progress(done, total, name)`` is called before each
file, and ``cancel`` (a ``threading.Event`` or anything with ``is_set``) is looked at
between files, so a stop takes at most one header read. A stopped scan still returns,
and remembers, what it had read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from app.engine.gguf.header import shown_name
from app.library.cache import load_cache, save_cache
from app.library.entries import LibraryEntry, read_entry, signature_of, split_parts
from app.library.locations import FOLDER, MADE, TANDEM, Found, Location, default_locations, find, unique_existing
from app.storage import paths

ScanProgress = Callable[[int, int, str], None]  # (files done, files in all, the file's name)


class _Flag(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class ScanResult:
    entries: list[LibraryEntry]          # usable ones first, then the refused, each by name
    locations: list[Location]            # the places that were looked through
    read: int = 0                        # files whose headers were read (the rest came from the cache)
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def usable(self) -> list[LibraryEntry]:
        return [e for e in self.entries if e.usable]

    @property
    def refused(self) -> list[LibraryEntry]:
        return [e for e in self.entries if not e.usable]


def library_locations(folders: Iterable[str | os.PathLike[str]] = (), *, include_defaults: bool = True,
                      environ=None, home: Path | None = None,
                      own: Iterable[str | os.PathLike[str]] | None = None, include_made: bool = False) -> list[Location]:
    """The drafts Tandem made from the user's targets (with ``include_made``), Tandem's
    own model folders (``own``, by default ``paths.own_model_folders()``), the usual
    places (when ``include_defaults``) and the user's own folders. A file found twice
    keeps its first place's name, so a made draft reads "Made by Tandem"."""
    own = paths.own_model_folders() if own is None else own
    places = [Location(MADE, paths.drafts_dir())] if include_made else []
    places += [Location(TANDEM, Path(folder)) for folder in own]
    places += default_locations(environ, home) if include_defaults else []
    return unique_existing(places + [Location(FOLDER, Path(folder)) for folder in folders])


def scan_library(locations: list[Location], *, progress: ScanProgress | None = None,
                 cancel: _Flag | None = None, cache_path: Path | None = None,
                 use_cache: bool = True, in_use: Iterable[str | os.PathLike[str]] = ()) -> ScanResult:
    """``in_use``: files Tandem uses (the pair loaded, the recent pairs) wherever they
    are; listed when they exist, under the name a place gives them if it holds them too."""
    report = progress or (lambda done, total, name: None)
    found = _unique([*(f for location in locations for f in find(location)), *_files_in_use(in_use)])
    remembered = load_cache(cache_path) if use_cache else {}
    entries: list[LibraryEntry] = []
    read = 0
    cancelled = False
    for done, item in enumerate(found):
        if cancel is not None and cancel.is_set():
            cancelled = True
            break
        report(done, len(found), item.name)
        entry = _still_valid(remembered.get(os.fsdecode(item.path)), item)
        if entry is None:
            entry = read_entry(item.path, item.name, item.source)
            read += 1
        entries.append(entry)
    else:
        report(len(found), len(found), "")
    if use_cache:
        # A stopped scan keeps what it did not reach from the last one, to be checked next time.
        kept = {e.path: e for e in remembered.values()} if cancelled else {}
        kept.update({e.path: e for e in entries})
        save_cache(list(kept.values()), cache_path)
    entries.sort(key=lambda e: (not e.usable, e.name.casefold(), e.path))
    notes = [] if any(l.kind not in (TANDEM, MADE) for l in locations) else ["No model folders were found (LM Studio, Ollama, the Hugging Face cache); "
                                  "add a folder that holds GGUF files."]
    return ScanResult(entries, locations, read, cancelled, notes)


def _files_in_use(files: Iterable[str | os.PathLike[str]]) -> Iterable[Found]:
    for file in files:
        path = Path(file)
        try:
            if path.is_file():
                yield Found(path, shown_name(path), TANDEM)
        except (OSError, ValueError):
            continue  # an unreadable or malformed path in the settings: nothing to list


def _unique(found: Iterable[Found]) -> list[Found]:
    """Each file once (a hub snapshot in two revisions, a folder added twice, an Ollama blob
    under two tags: the first name wins), and a split model once, by its first part."""
    seen: set[str] = set()
    kept = []
    for item in found:
        if split_parts(item.path) is None:
            continue  # a later part of a split model: its first part stands for it
        try:
            key = os.path.realpath(item.path)
        except (OSError, ValueError):
            continue
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def _still_valid(entry: LibraryEntry | None, item: Found) -> LibraryEntry | None:
    """The cached entry if its files are unchanged (renamed as found now), else None."""
    if entry is None:
        return None
    try:
        parts = split_parts(item.path) or [item.path]
        current = signature_of([p for p in parts if p.exists()])
    except OSError:
        return None
    if current != entry.signature:
        return None
    if (entry.name, entry.source) != (item.name, item.source):
        return replace(entry, name=item.name, source=item.source)
    return entry
