"""The About box's details: versions, where the log is, and the licences of what ships."""

from __future__ import annotations

import sys
from importlib import metadata

from app import __version__

LICENCES = (
    "Tandem: MIT licence (LICENSE).",
    "Qt 6 and PySide6: LGPL v3 (you may replace the Qt libraries the app loads).",
    "llama.cpp and llama-cpp-python: MIT licence.",
    "Demo models (SmolLM2-135M-Instruct): Apache 2.0.",
)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def about_details(log_path: object) -> str:
    """``log_path``: where the log is (``app.logs.log_file()``, which the window hands over:
    a widget never asks the store where its files are)."""
    return "\n".join([
        f"Version {__version__} · llama-cpp-python {_version('llama-cpp-python')} · "
        f"PySide6 {_version('PySide6-Essentials')} · Python {sys.version.split()[0]}",
        f"Log file: {log_path}",
        "",
        *LICENCES,
    ])
