"""Compact MTP heads on disk (``app.engine.gguf.compact_head`` says what they are and why).

A float target whose head drafts on this machine's CPU gets one, written the first time
it loads (seconds: a few hundred MB read and quantised) into the cache folder's
``mtp-heads/`` and used from then on. The file is named by the target's resolved path,
size and modification time, so a target replaced or changed gets a new one; at most
``HEADS_KEPT`` are kept, the least recently used removed first. Where one cannot be made
(no room on the disk or in memory, a file gguf cannot read), the target's own head drafts,
and the log says why in one line.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from app.engine.errors import EngineError
from app.engine.gguf.compact_head import FORMAT, CompactHeadError, compact_plan, write_compact_head
from app.engine.gguf.model_file import ModelFile, open_model_file
from app.storage import paths
from app.storage.paths import DISK_RESERVE
from app.system_memory import available_ram

log = logging.getLogger("tandem.heads")

HEADS_KEPT = 4
STALE_PARTIAL_S = 3600  # a partial copy this old was left by a process that died writing it


def compact_head_for(target: ModelFile, progress: Callable[[float], None] | None = None) -> Path | None:
    """The compact head of ``target`` (made now if missing), or None where the target's own
    head should draft: its output matrix is quantised already, or one cannot be made here
    (said in the log). Call it only for a target whose head runs on this machine's CPU."""
    values = {f"{target.architecture}.{key}": value for key, value in target.hparams.items()}
    plan, _ = compact_plan(target.architecture, values, target.header.tensors)
    if plan is None:
        return None
    if plan.bytes * 4 > available_ram():
        log.warning("no compact MTP head for %s: %d MB would not leave enough memory",
                    target.path.name, plan.bytes >> 20)
        return None
    folder = paths.mtp_heads_dir()
    dest = folder / _file_name(target)
    if dest.exists():
        try:
            open_model_file(dest)
            os.utime(dest)  # most recently used
            return dest
        except (EngineError, OSError) as exc:
            log.warning("the compact MTP head %s is unreadable (%s): making it again", dest.name, exc)
            forget(dest)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(folder).free < plan.bytes + DISK_RESERVE:
            log.warning("no compact MTP head for %s: %d MB would leave the disk too full",
                        target.path.name, plan.bytes >> 20)
            return None
        write_compact_head(target.resolved, dest, plan, progress)
        open_model_file(dest)
    except (CompactHeadError, EngineError, OSError) as exc:
        log.warning("no compact MTP head for %s: %s", target.path.name, exc)
        forget(dest)
        return None
    log.info("wrote a compact MTP head for %s (%s output matrix to Q8_0, %d MB): %s",
             target.path.name, plan.head_type, dest.stat().st_size >> 20, dest)
    _prune(folder, keep=dest)
    return dest


def forget(head: Path) -> None:
    """Remove a compact head (one llama.cpp would not load is made again next time)."""
    head.unlink(missing_ok=True)


def _file_name(target: ModelFile) -> str:
    key = f"{target.resolved}|{target.identity.size}|{target.identity.mtime_ns}|{FORMAT}"
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in target.resolved.stem)[:80]
    return f"{stem}-mtp-q8_0-{digest}.gguf"


def _prune(folder: Path, keep: Path) -> None:
    heads = sorted(folder.glob("*.gguf"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [h for h in heads if h != keep][HEADS_KEPT - 1:]:
        forget(old)
    for partial in folder.glob("*.partial"):  # left by a process that died writing
        if time.time() - partial.stat().st_mtime > STALE_PARTIAL_S:
            forget(partial)
