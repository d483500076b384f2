"""Can this draft speculate for that target? The window's question (the settings dialog),
answered as ``app.backends.loader.check_pair`` answers it: the two files' metadata, then a
trial load of each in a child process (``app.backends.model_check``), remembered per file.

Composed here rather than imported from the loader, which imports llama.cpp: the window's
side reaches the backends' children only through this module and ``app.session.drafting``
(each named in pyproject.toml's contracts)."""

from __future__ import annotations

from pathlib import Path

from app.backends.model_check import require_model_runs
from app.engine.gguf.meta import pair_verdict
from app.engine.gguf.model_file import open_model_file
from app.errors import TandemError


def check_pair_blocking(target: str | Path, draft: str | Path) -> tuple[bool, str | None, str]:
    """(ok, failed rule, reason): the pair's metadata, then both files' trial loads (each in
    a child, once per file); a file that fails says so as rule "file". Blocks: call it off
    the UI thread (``app.bridge.async_glue.PairChecker``)."""
    try:
        target_file, draft_file = open_model_file(target), open_model_file(draft)
        result = pair_verdict(target_file.metadata, draft_file.metadata)
        if result.ok:
            require_model_runs(target_file)
            require_model_runs(draft_file)
    except TandemError as exc:
        return False, "file", str(exc)
    return result.ok, result.rule, result.reason
