"""Each chat's cache, kept on disk beside the history, so that a reopened chat (after
another chat, another model, or a restart) reads only what it adds.

The engine's cache holds one conversation. Opening another one threw it away, and
coming back read the whole history again: a 3,600-token chat is 13 s on a CPU. Here,
before a reply for another chat (or a Compare run, a served request, a new load, the
engine's end) replaces the conversation in the cache, its state is written to
``<data>/chat-states/<chat>.state``; a later reply to that chat whose prompt starts with
the saved tokens puts the state back (``ImageBackend.load_cache_image``) and reads only
the rest. No peer desktop app keeps this.

Never trusted over the text: a saved state is used only where its model, context and
llama.cpp build match the loaded ones (``cache_identity``), and only as far as its tokens
are those of the prompt built from the chat as it is now; a file that fails any check is
ignored with one line and removed, and the history is read as before. Bounded: a state
is written only where it saves reading at least ``WORTH`` tokens and the disk keeps
``DISK_RESERVE`` free after it; at most ``MOST`` files and ``BUDGET_BYTES`` together, the
least recently used removed first.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import struct
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from app.engine.backend import CacheImage
from app.engine.speculation.drafters import common_prefix

log = logging.getLogger(__name__)

MAGIC = b"TANDEM-CHAT-STATE 1\n"
WORTH = 256                 # tokens a state must save reading (below: reading is cheaper than the file)
BUDGET_BYTES = 4 << 30      # every chat's state together, on disk
MOST = 16                   # chats with a saved state
DISK_RESERVE = 2 << 30      # free disk space a state never takes
_HEADER_MOST = 64 << 20     # a header longer than this is not one of ours
SUFFIX = ".state"


class ChatStates:
    """The saved states in one folder; ``before(target, chat, prompt)`` before each reply."""

    def __init__(self, folder: Path, *, budget_bytes: int = BUDGET_BYTES, most: int = MOST,
                 free_disk: Callable[[Path], int] | None = None) -> None:
        self.folder = folder
        self.budget_bytes, self.most = budget_bytes, most
        self._free_disk = free_disk or (lambda path: shutil.disk_usage(path).free)
        self._held: int | None = None   # the chat whose conversation the cache holds
        self._dirty = False             # it changed since it was written
        self.loaded = self.saved = 0    # states put back and written, since it began

    def before(self, target, chat: int | None, prompt: Sequence[int]) -> None:
        """Before a reply to ``chat`` (None: not a chat's, e.g. a Compare run) on ``prompt``:
        the chat held so far written out if another takes its place, and this chat's
        saved state put back where it saves reading. Never raises: at worst the prompt is
        read as it would have been."""
        if not hasattr(target, "cache_image"):
            self.release()
            return
        try:
            if chat != self._held:
                self.park(target)
                if chat is not None:
                    self._load(target, chat, prompt)
        except Exception:  # noqa: BLE001 — a saved state is a shortcut, never a reason to fail
            log.exception("A chat's saved state could not be used")
        self._held, self._dirty = chat, chat is not None

    def park(self, target) -> None:
        """Write the held chat's state (if it changed since) before something else uses
        the cache: another chat, a served request, a new load, the engine's end."""
        chat, self._dirty = self._held, False
        if chat is None or not hasattr(target, "cache_image") or len(target.tokens) < WORTH:
            return
        try:
            self._write(chat, target.cache_image())
        except Exception as exc:  # noqa: BLE001 — not saved: it is read again, as before
            log.warning("The state of chat %s was not saved: %s", chat, exc)

    def release(self) -> None:
        """The cache is gone (its models closed): no chat is held."""
        self._held, self._dirty = None, False

    # --- the files --------------------------------------------------------------------

    def _path(self, chat: int) -> Path:
        return self.folder / f"{int(chat)}{SUFFIX}"

    def _write(self, chat: int, image: CacheImage) -> None:
        rows = b""
        if image.rows is not None:
            buffer = io.BytesIO()
            np.savez(buffer, rows=image.rows[0], known=image.rows[1])
            rows = buffer.getvalue()
        header = json.dumps({"identity": image.identity, "tokens": list(map(int, image.tokens)),
                             "state_bytes": len(image.state), "rows_bytes": len(rows),
                             "sha256": _digest(image.state, rows)}).encode()
        size = len(MAGIC) + 8 + len(header) + len(image.state) + len(rows)
        self.folder.mkdir(parents=True, exist_ok=True)
        if size > self.budget_bytes or self._free_disk(self.folder) - size < DISK_RESERVE:
            log.info("The state of chat %s (%d MB) was not saved: the disk has no room to spare", chat, size >> 20)
            return
        path = self._path(chat)
        part = path.with_suffix(".part")
        with open(part, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(header)) + header)
            f.write(image.state)
            f.write(rows)
        os.replace(part, path)  # a reader never sees half a file
        self.saved += 1
        self._trim(keep=path)

    def _trim(self, keep: Path) -> None:
        """The least recently used states removed, past ``MOST`` files or ``BUDGET_BYTES``."""
        others = sorted(((_stat(p), p) for p in self.folder.glob(f"*{SUFFIX}") if p != keep),
                        key=lambda item: item[0][1], reverse=True)  # newest first, each stat read once
        total = _stat(keep)[0]
        for i, ((size, _mtime), path) in enumerate(others, start=1):
            total += size
            if i >= self.most or total > self.budget_bytes:
                path.unlink(missing_ok=True)

    def _load(self, target, chat: int, prompt: Sequence[int]) -> None:
        path = self._path(chat)
        if not path.exists():
            return
        image, why = read_state(path, target.cache_identity, target.n_vocab)
        # Only what the chat's text still says counts: the saved tokens up to where the
        # prompt built from it now differs (an edit, a regenerated reply, a reply whose
        # text tokenizes otherwise than it was written).
        shared = common_prefix(image.tokens, prompt) if image is not None else 0
        if image is not None and shared < WORTH:
            image, why = None, "the chat changed since it was saved"
        if image is None:
            log.warning("The saved state of chat %s is ignored (%s); its history is read instead", chat, why)
            path.unlink(missing_ok=True)
            return
        if shared - common_prefix(target.tokens, prompt) < WORTH:
            return  # the cache holds about as much already
        try:
            target.load_cache_image(image)
            if shared < len(image.tokens):
                target.trim(shared)  # exact on every memory (a recurrent one may read again)
        except Exception as exc:  # noqa: BLE001 — llama.cpp refused it: read the history
            log.warning("The saved state of chat %s is ignored (llama.cpp refused it: %s); its history is read "
                        "instead", chat, exc)
            path.unlink(missing_ok=True)
            return
        os.utime(path)  # most recently used
        self.loaded += 1


def forget(folder: Path, chat: int) -> None:
    """Remove a chat's saved state (the chat was deleted: nothing of it stays on disk)."""
    try:
        (folder / f"{int(chat)}{SUFFIX}").unlink(missing_ok=True)
    except OSError as exc:
        log.warning("The saved state of chat %s could not be removed: %s", chat, exc)


def prune(folder: Path, live: set[int]) -> None:
    """Remove the saved states of chats not in ``live`` (deleted from the history)."""
    for path in list(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []:
        if not (path.stem.isdigit() and int(path.stem) in live):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("A saved chat state could not be removed: %s", exc)


def read_state(path: Path, identity: dict, n_vocab: int) -> tuple[CacheImage | None, str]:
    """The image in ``path`` if it is whole and fits ``identity``; else None and why."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if f.read(len(MAGIC)) != MAGIC:
                return None, "not a saved state"
            (length,) = struct.unpack("<Q", f.read(8).ljust(8, b"\0"))
            if length > min(_HEADER_MOST, size):
                return None, "its header is damaged"
            header = json.loads(f.read(length))
            state_bytes, rows_bytes = int(header["state_bytes"]), int(header["rows_bytes"])
            if len(MAGIC) + 8 + length + state_bytes + rows_bytes != size or min(state_bytes, rows_bytes) < 0:
                return None, "the file is cut short or too long"
            if header["identity"] != identity:
                return None, "it was saved with another model, context or llama.cpp"
            tokens = header["tokens"]
            if (not isinstance(tokens, list) or len(tokens) > identity.get("n_ctx", 0)
                    or not all(type(t) is int and 0 <= t < n_vocab for t in tokens)):
                return None, "its tokens are not this model's"
            state, rows = f.read(state_bytes), f.read(rows_bytes)
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        return None, f"it could not be read: {exc}"
    if _digest(state, rows) != header.get("sha256"):
        return None, "its bytes are damaged"
    saved_rows = None
    if rows:
        try:
            with np.load(io.BytesIO(rows), allow_pickle=False) as npz:
                saved_rows = (npz["rows"].astype(np.float16), npz["known"].astype(bool))
        except (OSError, ValueError, KeyError) as exc:
            return None, f"its head's rows could not be read: {exc}"
        if saved_rows[0].ndim != 2 or len(saved_rows[0]) != len(tokens) or saved_rows[1].shape != (len(tokens),):
            return None, "its head's rows do not match its tokens"
    return CacheImage(tokens, state, dict(identity), saved_rows), ""


def _digest(state: bytes, rows: bytes) -> str:
    """SHA-256 of the state and rows, without joining them (a state is tens of MB)."""
    digest = hashlib.sha256(state)
    digest.update(rows)
    return digest.hexdigest()


def _stat(path: Path) -> tuple[int, float]:
    try:
        st = path.stat()
        return st.st_size, st.st_mtime
    except OSError:
        return 0, 0.0
