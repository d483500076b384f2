"""The one module that knows where Tandem's files live.

Everything else asks here. ``TANDEM_HOME`` puts every directory under one folder
(portable installs, tests); otherwise platformdirs picks the OS's conventions.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "Tandem"
# Free disk space that a file Tandem writes only to save time (a chat's saved state, a
# compact MTP head) never takes: such a file is not written where it would leave less.
DISK_RESERVE = 2 << 30


def _root(kind: str) -> Path:
    home = os.environ.get("TANDEM_HOME")
    if home:
        return Path(home) / kind
    getter = {
        "config": platformdirs.user_config_path,
        "data": platformdirs.user_data_path,
        "cache": platformdirs.user_cache_path,
        "log": platformdirs.user_log_path,
        "run": platformdirs.user_runtime_path,
    }[kind]
    return getter(APP_NAME, appauthor=False)


def config_dir() -> Path:
    return _ensure(_root("config"))


def data_dir() -> Path:
    return _ensure(_root("data"))


def cache_dir() -> Path:
    return _ensure(_root("cache"))


def log_dir() -> Path:
    return _ensure(_root("log"))


def runtime_dir() -> Path:
    """Per-user files of a running Tandem (the one-window lock and its socket); the
    cache folder stands in where the system has no runtime folder (a container)."""
    try:
        return _ensure(_root("run"))
    except OSError:
        return _ensure(cache_dir() / "run")


def models_dir() -> Path:
    """Provisioned models (the demo pair and files derived from it)."""
    return _ensure(cache_dir() / "models")


def own_model_folders() -> list[Path]:
    """Where Tandem keeps model files it fetched or wrote (the demo pair, drafts made
    here, anything later under its data folder), for the library to list. Not created."""
    return [_root("cache") / "models", _root("data")]


def mtp_heads_dir() -> Path:
    """Compact copies of float targets' MTP heads (app/backends/head_files.py): made
    again whenever missing, so a cache. Not created until one is written."""
    return _root("cache") / "mtp-heads"


def drafts_dir() -> Path:
    """Drafts made from the user's targets (``tandem make-draft``): the user's data, kept."""
    return _ensure(data_dir() / "drafts")


def chat_states_dir() -> Path:
    """Each chat's saved cache (app/session/chat_states.py): the user's, beside the history.
    Not created until a state is written."""
    return _root("data") / "chat-states"


def settings_file() -> Path:
    return config_dir() / "settings.json"


def history_db() -> Path:
    return data_dir() / "history.sqlite3"


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
