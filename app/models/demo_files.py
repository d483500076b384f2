"""Whether the demo pair (``app.models.demo``) is on disk, and so whether the window asks
before fetching it: read without importing the provisioning (which reaches llama.cpp)."""

from __future__ import annotations

from pathlib import Path

from app.models.demo_facts import DRAFT_FILE, TARGET_FILE
from app.storage import paths


def is_provisioned() -> bool:
    folder = paths.models_dir()
    return (folder / DRAFT_FILE).is_file() and (folder / TARGET_FILE).is_file()


def needs_first_run(settings) -> bool:
    """No model chosen (``settings.target_path``) and no demo pair on disk: the window
    asks before fetching anything (the first-run screen)."""
    return not settings.target_path and not is_provisioned()


def provisioned_paths() -> tuple[Path, Path]:
    """The demo pair's (target, draft) where ``demo_pair`` puts them (on disk when
    ``is_provisioned``)."""
    folder = paths.models_dir()
    return folder / TARGET_FILE, folder / DRAFT_FILE
