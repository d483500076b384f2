"""Tandem's picks: a short table of target + draft pairs for common GPU sizes, kept as
data (``app/resources/hub_picks.json``, which also says how its entries were chosen), read and checked
here so a malformed entry is an error in the tests, not in a user's window."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from app.hub.files import HubFile, parse_file


@dataclass(frozen=True)
class Pick:
    name: str
    gpu_gb: float           # the least GPU memory that holds the pair (0: a CPU will do)
    drafter: str            # a drafter kind's word (app/drafter_kinds.py): "model", "mtp"
    target: HubFile
    draft: HubFile | None
    note: str


def _file(entry: dict) -> HubFile:
    revision = entry.get("revision") or None
    file = parse_file(f"hf://{entry['repo']}/{entry['file']}")
    return HubFile(file.repo, file.filename, None if revision == "main" else revision)


def load_picks() -> tuple[str, list[Pick]]:
    """(how the entries were chosen, the entries, smallest GPU first)."""
    text = resources.files("app.resources").joinpath("hub_picks.json").read_text(encoding="utf-8")
    table = json.loads(text)
    picks = [Pick(e["name"], float(e["gpu_gb"]), e["drafter"], _file(e["target"]),
                  _file(e["draft"]) if e.get("draft") else None, e.get("note", ""))
             for e in table["picks"]]
    return table["how_chosen"], sorted(picks, key=lambda p: (p.gpu_gb, p.name))


def picks_for(text: str = "", gpu_gb: float | None = None) -> list[Pick]:
    """The picks whose name or repositories hold ``text`` and that fit ``gpu_gb`` (None:
    any size)."""
    _, picks = load_picks()
    needle = text.lower()
    return [p for p in picks
            if (not needle or needle in p.name.lower() or needle in p.target.repo.lower()
                or (p.draft is not None and needle in p.draft.repo.lower()))
            and (gpu_gb is None or p.gpu_gb <= gpu_gb)]
