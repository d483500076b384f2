"""Will llama.cpp survive this model file? Load it in a child process first, once per file.

The validator (``app.engine.gguf.header`` with ``app.engine.gguf.rules``) refuses every lie in a
GGUF file that llama.cpp is known to abort on; this is the net under it for the
ones nobody foresaw. Before a model file is loaded for the first time,
``require_model_runs`` runs ``app.backends.model_trial`` on it in a child
(``python -m app --check-model PATH``) and reads how that ended. A child that dies
becomes a one-line ``ModelFileError`` naming the file and what llama.cpp said last.

A pass is remembered under the file's resolved path, size and modification time (and
the llama.cpp build's fingerprint: another build may abort where this one did not),
taken from the ``ModelFile`` the load opened (``app.engine.gguf.model_file``), so a later
load starts no child and reads nothing more. A failure is never remembered: the next
load tries again, in case the file was replaced.

This module never imports ``llama_cpp``: the parent must not be the one that dies.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from app.backends.build_check import ROOT, _signal_name, check_llama_build, fingerprint, json_record, library_files
from app.engine.errors import ModelFileError
from app.engine.gguf.header import shown_name, shown_path
from app.engine.gguf.model_file import ModelFile, open_model_file
from app.errors import last_words  # llama.cpp's last words: app.errors, so the window's side reads them too

CHECK_FLAG = "--check-model"  # handled first thing by app.__main__
CACHE_NAME = "model-checks.json"
CACHE_VERSION = 1
MAX_REMEMBERED = 256          # passes kept; the oldest go first
BASE_TIMEOUT = 60.0           # seconds for a small file ...
SECONDS_PER_GIB = 15.0        # ... plus reading the weights once at ~70 MB/s
# The child reports each step (load progress per tensor, then tokenizing, decoding); a
# step that takes longer than this is a hang (a tokenizer that loops), not a big file.
QUIET_BASE = 20.0             # seconds, ...
QUIET_PER_GIB = 2.0           # ... plus a one-thread decode of a small batch
POLL_SECONDS = 0.1
STDERR_LINES = 40             # the tail of llama.cpp's words kept for the message

# (fraction of the trial load done) -> False to cancel
TrialProgress = Callable[[float], bool | None]


@dataclass
class TrialOutcome:
    """How one child trial ended."""

    ok: bool
    detail: str = ""                # one line, when not ok: what happened and what llama.cpp said
    returncode: int | None = None
    signal_name: str = ""
    cancelled: bool = False
    seconds: float = 0.0
    records: list[dict] = field(default_factory=list)


@dataclass
class ModelCheck:
    ok: bool
    cached: bool                    # answered from an earlier pass, no child started
    seconds: float
    message: str = ""               # one line naming the file, when not ok
    cancelled: bool = False

    def raise_if_failed(self) -> None:
        if not self.ok:
            raise ModelFileError(self.message)


def trial_command(path: Path) -> list[str | bytes]:
    # The path's bytes as they are: a name that is not UTF-8 reaches the child intact.
    target = os.fsencode(path)
    if getattr(sys, "frozen", False):  # the bundle's executable is the interpreter
        return [sys.executable, CHECK_FLAG, target]
    return [sys.executable, "-m", "app", CHECK_FLAG, target]


def timeout_for(size: int) -> float:
    return BASE_TIMEOUT + SECONDS_PER_GIB * size / 2**30


def quiet_for(size: int) -> float:
    return QUIET_BASE + QUIET_PER_GIB * size / 2**30


def run_trial_child(path: Path, *, progress: TrialProgress | None = None, timeout: float | None = None,
                    quiet: float | None = None, env: dict | None = None) -> TrialOutcome:
    """Run the trial in a child process and say how it ended (never raises). It is
    stopped after ``timeout`` seconds in all, or ``quiet`` seconds without a report."""
    started = time.perf_counter()
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    timeout = timeout_for(size) if timeout is None else timeout
    quiet = quiet_for(size) if quiet is None else quiet
    child_env = dict(os.environ if env is None else env)
    child_env["GGML_NO_BACKTRACE"] = "1"  # an abort says its line and goes; no debugger attached
    if not getattr(sys, "frozen", False):
        # The child must import this checkout's ``app``, wherever it was started from.
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), child_env.get("PYTHONPATH")]))
    try:
        child = subprocess.Popen(trial_command(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL, env=child_env)
    except OSError as exc:
        return TrialOutcome(False, f"the trial load could not start ({exc})", seconds=time.perf_counter() - started)

    records: list[dict] = []
    stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
    readers = [threading.Thread(target=read_records, args=(child.stdout, records), daemon=True),
               threading.Thread(target=read_lines, args=(child.stderr, stderr_tail), daemon=True)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    fraction, read = 0.0, 0
    heard, heard_at, stage = 0, time.monotonic(), "starting"

    def latest_fraction() -> float:
        nonlocal read
        found = fraction
        for record in records[read:]:
            value = record.get("fraction")
            if record.get("stage") == "loading" and isinstance(value, (int, float)) and 0 <= value <= 1:
                found = float(value)
        read = len(records)
        return found

    cancelled = timed_out = stalled = False
    while child.poll() is None:
        if len(records) > heard:
            heard, heard_at = len(records), time.monotonic()
            stage = str(records[heard - 1].get("stage", stage))
        # Asked again at every poll, not only when the child reports: a newer load
        # in the window (or its closing) must be able to stop a trial that is stuck.
        fraction = latest_fraction()
        if progress is not None and progress(fraction) is False:
            cancelled = True
        elif time.monotonic() > deadline:
            timed_out = True
        elif time.monotonic() - heard_at > quiet:
            stalled = True
        if cancelled or timed_out or stalled:
            child.kill()
            break
        try:
            child.wait(POLL_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    child.wait()
    for reader in readers:
        reader.join(5)
    if progress is not None and not (cancelled or timed_out or stalled):
        last = latest_fraction()  # what arrived after the last poll
        if last != fraction:
            progress(last)
    seconds = time.perf_counter() - started
    code = child.returncode
    if cancelled:
        return TrialOutcome(False, "the trial load was cancelled", code, cancelled=True, seconds=seconds,
                            records=records)
    if timed_out:
        return TrialOutcome(False, f"a trial load did not finish in {timeout:.0f} s"
                            + _said(last_words(stderr_tail)), code, seconds=seconds, records=records)
    if stalled:
        return TrialOutcome(False, f"llama.cpp hung on it in a trial load (no progress for {quiet:.0f} s while "
                            f"{stage})" + _said(last_words(stderr_tail)), code, seconds=seconds, records=records)
    final = records[-1] if records and records[-1].get("stage") == "done" else {}
    if code < 0:
        name = _signal_name(-code)
        return TrialOutcome(False, f"llama.cpp crashed on it in a trial load ({name}"
                            + _said(last_words(stderr_tail), ": ") + ")", code, name, seconds=seconds,
                            records=records)
    if code == 0 and final.get("ok"):
        return TrialOutcome(True, "", 0, seconds=seconds, records=records)
    if final.get("error"):
        return TrialOutcome(False, str(final["error"]), code, seconds=seconds, records=records)
    words = last_words(stderr_tail)
    return TrialOutcome(False, f"a trial load exited with code {code}" + _said(words), code,
                        seconds=seconds, records=records)


def _said(words: str, lead: str = "; llama.cpp said: ") -> str:
    return f"{lead}{words}" if words else ""


def read_records(stream, records: list[dict]) -> None:
    """A child's JSON records from its stdout (a reader thread's loop)."""
    for raw in stream:
        record = json_record(raw)
        if record is not None:
            records.append(record)


def read_lines(stream, lines: collections.deque[str]) -> None:
    """A child's words from its stderr, the last ones kept (a reader thread's loop)."""
    for raw in stream:
        text = raw.decode("utf-8", "replace").strip()
        if text:
            lines.append(text)


# -- the cache ------------------------------------------------------------------------


def trial_key(model: ModelFile, build: str) -> str:
    digest = hashlib.sha256()
    digest.update(os.fsencode(model.resolved) + b"\0")
    digest.update(f"{model.identity.size}:{model.identity.mtime_ns}:{build}".encode())
    return digest.hexdigest()


def _cache_file(cache_dir: Path | None) -> Path:
    if cache_dir is None:
        from app.storage import paths

        cache_dir = paths.cache_dir()
    return cache_dir / CACHE_NAME


def _load_passes(cache: Path) -> dict[str, dict]:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # missing or damaged: trials run again, nothing worse
    passes = data.get("passed") if isinstance(data, dict) and data.get("version") == CACHE_VERSION else None
    return {k: v for k, v in passes.items() if isinstance(v, dict)} if isinstance(passes, dict) else {}


def _remember_pass(cache: Path, key: str, path: Path, seconds: float) -> None:
    passes = _load_passes(cache)  # read again: another Tandem may have added its own
    passes.pop(key, None)
    passes[key] = {"file": shown_path(path), "seconds": round(seconds, 3),
                   "checked": time.strftime("%Y-%m-%d %H:%M:%S")}
    while len(passes) > MAX_REMEMBERED:
        passes.pop(next(iter(passes)))
    try:
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "passed": passes}), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass  # a read-only cache only means trying the file again next time


# -- what loaders call ----------------------------------------------------------------


def check_model(path: str | os.PathLike[str] | ModelFile, *, progress: TrialProgress | None = None,
                cache_dir: Path | None = None, use_cache: bool = True) -> ModelCheck:
    """Trial-load the file in a child unless this very file passed before. A path is
    opened first (``open_model_file``: a bad path, a structural problem or a known lie
    raises ModelFileError at once, with its precise reason); a ModelFile was opened by
    the caller. Everything the child finds comes back in ``ModelCheck.message``."""
    started = time.perf_counter()
    model = open_model_file(path)
    cache = _cache_file(cache_dir) if use_cache else None
    key = trial_key(model, fingerprint(library_files()))
    if cache is not None and key in _load_passes(cache):
        return ModelCheck(True, True, time.perf_counter() - started)
    # A build that dies on every model must not be blamed on this one.
    check_llama_build(cache_dir=cache_dir).raise_if_broken()
    outcome = run_trial_child(model.resolved, progress=progress)  # the file that was validated
    seconds = time.perf_counter() - started
    if outcome.ok:
        if cache is not None:
            _remember_pass(cache, key, model.path, outcome.seconds)
        return ModelCheck(True, False, seconds)
    # The child's own errors name the file it was given; the message names it as the user did.
    detail = outcome.detail.removeprefix(f"{shown_name(model.resolved)}: ").removeprefix(f"{shown_name(model.path)}: ")
    return ModelCheck(False, False, seconds, f"{shown_name(model.path)}: {detail}", outcome.cancelled)


def require_model_runs(path: str | os.PathLike[str] | ModelFile, *, progress: TrialProgress | None = None,
                       cache_dir: Path | None = None) -> ModelCheck:
    """:func:`check_model`, raising ModelFileError (one line, naming the file) unless it passed."""
    check = check_model(path, progress=progress, cache_dir=cache_dir)
    check.raise_if_failed()
    return check
