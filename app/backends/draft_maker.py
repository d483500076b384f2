"""Make a draft from a target: the plan (``engine/speculation/self_draft.py``), written in a child
process with a progress bar and a cancel, then checked and remembered.

1. **Before**: the disk space the plan needs is said (``DraftPlan.bytes_needed``) and a
   disk that lacks it is refused at once, in one line.
2. **While**: ``app.backends.draft_child`` runs llama.cpp's quantizer and reports each
   tensor it writes; ``progress(fraction)`` hears of each (returning False cancels, as
   does ``cancel.set()`` or Ctrl+C). A cancel kills the child and removes the partial file.
3. **After**: the file goes to the data folder's drafts (``paths.drafts_dir()``) under its
   final name, is validated and trial-loaded like any other model
   (``model_check.check_model``), and remembered for its target
   (``storage/made_drafts.py``), where the library's draft finder offers it first.

Every failure is one line (``SelfDraftError``), and leaves no file behind.
"""

from __future__ import annotations

import atexit
import collections
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from app.backends.build_check import ROOT
from app.backends.model_check import check_model, last_words, read_lines, read_records
from app.engine.errors import ModelFileError
from app.engine.gguf.header import shown_name, shown_path
from app.engine.speculation.self_draft import KEEP_TYPE, DraftPlan, SelfDraftError
from app.storage import made_drafts, paths

CHILD_FLAG = "--make-draft"  # handled first thing by app.__main__
POLL_SECONDS = 0.1
QUIET_SECONDS = 600.0         # no tensor written for this long: llama.cpp is stuck (a big one takes a minute)
STDERR_LINES = 40

# (fraction done, what is happening) -> False to cancel
DraftProgress = Callable[[float, str], bool | None]


_LIVE: dict[subprocess.Popen, Path] = {}  # children writing now, and their partial files


@atexit.register
def _stop_children() -> None:
    """An app that quits mid-draft leaves neither a child writing nor its partial file."""
    for child, partial in list(_LIVE.items()):
        child.kill()
        child.wait()
        partial.unlink(missing_ok=True)


class _Flag(Protocol):
    def is_set(self) -> bool: ...


class DraftCancelled(SelfDraftError):
    """Stopped on request; nothing was kept."""


@dataclass(frozen=True)
class MadeDraftFile:
    path: Path
    plan: DraftPlan
    size: int
    seconds: float


def megabytes(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


def space_line(plan: DraftPlan, folder: Path | None = None) -> str:
    """Before: what making it needs, in one line."""
    folder = paths.drafts_dir() if folder is None else folder
    return (f"Making a draft of {shown_name(plan.source)} ({plan.describe()}) needs up to "
            f"{megabytes(plan.bytes_needed)} of disk space in {shown_path(folder)}")


def check_space(plan: DraftPlan, folder: Path) -> None:
    free = shutil.disk_usage(folder).free
    if free < plan.bytes_needed:
        raise SelfDraftError(f"Not enough disk space for the draft: it needs up to {megabytes(plan.bytes_needed)} "
                             f"in {shown_path(folder)}, which has {megabytes(free)} free")


def child_command(plan: DraftPlan, dest: Path) -> list[str | bytes]:
    ftype = KEEP_TYPE if plan.variant == KEEP_TYPE else plan.variant
    args = [CHILD_FLAG, os.fsencode(plan.source), os.fsencode(dest), ftype, *map(str, plan.prune)]
    if getattr(sys, "frozen", False):
        return [sys.executable, *args]
    return [sys.executable, "-m", "app", *args]


def make_draft(plan: DraftPlan, *, progress: DraftProgress | None = None, cancel: _Flag | None = None,
               folder: Path | None = None, check: bool = True) -> MadeDraftFile:
    """Write, check and remember the draft ``plan`` describes; SelfDraftError (one line) when
    it cannot be, DraftCancelled when stopped. Blocks: run it off a window's GUI thread."""
    started = time.perf_counter()
    folder = paths.drafts_dir() if folder is None else folder
    check_space(plan, folder)
    final = folder / plan.file_name()
    partial = final.with_name(final.name + ".part")
    report = progress or (lambda fraction, stage: None)
    try:
        _write(plan, partial, report, cancel)
        os.replace(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if check:
        report(1.0, "Checking the draft")
        try:
            outcome = check_model(final)
        except ModelFileError as exc:
            final.unlink(missing_ok=True)
            raise SelfDraftError(f"The draft made from {shown_name(plan.source)} does not load: {exc}") from None
        if not outcome.ok:
            final.unlink(missing_ok=True)
            raise SelfDraftError(f"The draft made from {shown_name(plan.source)} does not load: {outcome.message}")
    made_drafts.remember(plan.source, final, plan.variant,
                         plan.keep_layers if plan.keep_layers < plan.n_layer else None)
    return MadeDraftFile(final, plan, final.stat().st_size, time.perf_counter() - started)


def _write(plan: DraftPlan, partial: Path, report: DraftProgress, cancel: _Flag | None) -> None:
    env = dict(os.environ)
    env["GGML_NO_BACKTRACE"] = "1"
    if not getattr(sys, "frozen", False):  # the child imports this checkout's app
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    try:
        child = subprocess.Popen(child_command(plan, partial), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL, env=env)
    except OSError as exc:
        raise SelfDraftError(f"Could not start writing the draft ({exc})") from None
    _LIVE[child] = partial
    records: list[dict] = []
    stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
    readers = [threading.Thread(target=read_records, args=(child.stdout, records), daemon=True),
               threading.Thread(target=read_lines, args=(child.stderr, stderr_tail), daemon=True)]
    for reader in readers:
        reader.start()
    heard, heard_at, done = 0, time.monotonic(), 0
    stage = f"Writing the draft ({plan.describe()})"
    try:
        while child.poll() is None:
            if len(records) > heard:
                heard, heard_at = len(records), time.monotonic()
                done = max([done] + [r["done"] for r in records[-8:] if isinstance(r.get("done"), int)])
            fraction = min(1.0, done / plan.tensors_out) if plan.tensors_out else 0.0
            if report(fraction, stage) is False or (cancel is not None and cancel.is_set()):
                raise DraftCancelled("Making the draft was cancelled; nothing was kept")
            if time.monotonic() - heard_at > QUIET_SECONDS:
                raise SelfDraftError(f"llama.cpp stopped writing the draft (nothing for {QUIET_SECONDS:.0f} s)"
                                     + _said(last_words(stderr_tail)))
            try:
                child.wait(POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
    except BaseException:  # a cancel, a stall, Ctrl+C: the child goes, then its file
        child.kill()
        child.wait()
        raise
    finally:
        _LIVE.pop(child, None)
        for reader in readers:
            reader.join(5)
    final = records[-1] if records and records[-1].get("stage") == "done" else {}
    if child.returncode == 0 and final.get("ok"):
        return
    detail = final.get("error") or (f"llama.cpp ended with code {child.returncode}" + _said(last_words(stderr_tail)))
    raise SelfDraftError(f"Could not make a draft of {shown_name(plan.source)}: {detail}")


def _said(words: str) -> str:
    return f"; llama.cpp said: {words}" if words else ""
