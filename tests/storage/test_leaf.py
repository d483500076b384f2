"""storage is a leaf: the CLI, the bridge and the UI all use it, it uses none of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("PySide6", "qasync", "llama_cpp", "app.engine", "app.ui", "app.bridge", "app.backends",
             "app.models", "app.gpu")


def test_storage_imports_no_qt_engine_or_models():
    probe = (
        "import sys, app.storage.paths, app.storage.settings, app.storage.history, app.storage.export\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} or m.startswith({FORBIDDEN!r}))\n"
        "print(' '.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=Path(__file__).resolve().parents[2],
                            capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
