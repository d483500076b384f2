"""Each chat's state, kept on disk beside the history (``<data>/chat-states/<chat>.state``),
so that a reopened chat (after another chat, another model, or a restart) reads only what
it adds.

The engine's cache holds one conversation. Before a reply for another chat (or a Compare
run, a served request, a new load, the engine's end) replaces the one held, its state is
written here; a later reply to that chat whose prompt starts with the saved tokens puts
the state back and reads only the rest. When to write and when to put back is the rule
of ``app/session/kept_states.py`` (at least ``MIN_TOKENS_SAVED`` tokens), over states
named by their chat.

Never trusted over the text: a saved state is used only where its model, context and
llama.cpp build match the loaded ones (``cache_identity``), and only as far as its tokens
are those of the prompt built from the chat as it is now; a file that fails any check is
ignored with one line and removed, and the history is read as before. A file is written
whole or not at all (a reader never sees half of one). Bounded: a state is written only
where the disk keeps ``DISK_RESERVE`` (``app/storage/paths.py``) free after it; at most
``MAX_KEPT`` files and ``BUDGET_BYTES`` together, the least recently used removed first.
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

from app.engine.backend import CacheImage, KeepsStates
from app.engine.tokens import common_prefix
from app.session.kept_states import MIN_TOKENS_SAVED, KeptStates, worth_keeping
from app.storage.paths import DISK_RESERVE

log = logging.getLogger(__name__)

MAGIC = b"TANDEM-CHAT-STATE 1\n"
BUDGET_BYTES = 4 << 30      # every chat's state together, on disk
MAX_KEPT = 16               # chats with a saved state
_HEADER_MOST = 64 << 20     # a header longer than this is not one of ours
SUFFIX = ".state"

# A state file's parts: its header (magic, length, JSON), llama.cpp's state, the MTP rows.
_File = tuple[bytes, bytes | bytearray, bytes]


class ChatStates(KeptStates[Path, _File]):
    """The saved states in one folder; ``before(target, chat, prompt)`` before each reply."""

    def __init__(self, folder: Path, *, budget_bytes: int = BUDGET_BYTES, max_kept: int = MAX_KEPT,
                 free_disk: Callable[[Path], int] | None = None) -> None:
        super().__init__(max_kept=max_kept, budget_bytes=budget_bytes)
        self.folder = folder
        self._free_disk = free_disk or (lambda path: shutil.disk_usage(path).free)
        self._held: int | None = None   # the chat whose conversation the cache holds

    def before(self, target: KeepsStates | None, chat: int | None, prompt: Sequence[int]) -> None:
        """Before a reply to ``chat`` (None: not a chat's, e.g. a Compare run) on ``prompt``:
        the chat held so far written out if another takes its place, and this chat's
        saved state put back where it saves reading. Never raises: at worst the prompt is
        read as it would have been. ``target`` None (no model) or one that keeps no
        states: nothing is held."""
        if target is None or not target.keeps_states:
            self.release()
            return
        try:
            if chat != self._held:
                if chat is not None:
                    self._touch(self._path(chat))  # in use: the write below lets others go first
                self.save_held(target)
                if chat is not None:
                    self._load(target, chat, prompt)
        except Exception:  # noqa: BLE001 — a saved state is a shortcut, never a reason to fail
            log.exception("A chat's saved state could not be used")
        self._held = chat

    def save_held(self, target: KeepsStates | None) -> None:
        """Write the held chat's state before something else uses the cache: another
        chat, a served request, a new load, the engine's end."""
        chat = self._held
        if chat is None or target is None or not target.keeps_states or not worth_keeping(len(target.tokens)):
            return
        self.keep(target, self._path(chat))

    def release(self) -> None:
        """The cache is gone (its models closed): no chat is held."""
        self._held = None

    def _load(self, target: KeepsStates, chat: int, prompt: Sequence[int]) -> None:
        path = self._path(chat)
        if not path.exists():
            return
        image, why = read_state(path, target.cache_identity, target.n_vocab)
        # Only what the chat's text still says counts: the saved tokens up to where the
        # prompt built from it now differs (an edit, a regenerated reply, a reply whose
        # text tokenizes otherwise than it was written).
        if image is not None and common_prefix(image.tokens, prompt) < MIN_TOKENS_SAVED:
            image, why = None, "the chat changed since it was saved"
        if image is None:
            log.warning("The saved state of chat %s is ignored (%s); its history is read instead", chat, why)
            path.unlink(missing_ok=True)
            return
        key, shared = self.best(target.tokens, prompt, [(path, image.tokens)])
        if key is not None:  # (else the cache holds about as much already)
            self.put_back(target, path, image, shared)

    # --- the files (KeptStates' store) ---------------------------------------------------

    def _path(self, chat: int) -> Path:
        return self.folder / f"{int(chat)}{SUFFIX}"

    def _pack(self, image: CacheImage) -> tuple[_File, int]:
        rows = b""
        if image.rows is not None:
            buffer = io.BytesIO()
            np.savez(buffer, rows=image.rows[0], known=image.rows[1])
            rows = buffer.getvalue()
        header = json.dumps({"identity": image.identity, "tokens": list(map(int, image.tokens)),
                             "state_bytes": len(image.state), "rows_bytes": len(rows),
                             "sha256": _digest(image.state, rows)}).encode()
        head = MAGIC + struct.pack("<Q", len(header)) + header
        return (head, image.state, rows), len(head) + len(image.state) + len(rows)

    def _room(self) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self._free_disk(self.folder) - DISK_RESERVE

    def _put(self, path: Path, parts: _File) -> None:
        part = path.with_suffix(".part")
        with open(part, "wb") as f:
            for piece in parts:
                f.write(piece)
        os.replace(part, path)  # a reader never sees half a file

    def _by_recency(self) -> dict[Path, int]:
        stats = sorted(((_stat(p), p) for p in self.folder.glob(f"*{SUFFIX}")),
                       key=lambda item: item[0][1], reverse=True)  # each stat read once
        return {path: size for (size, _mtime), path in stats}

    def _touch(self, path: Path) -> None:
        try:
            os.utime(path)
        except FileNotFoundError:
            pass  # (none saved)
        except OSError as exc:  # (it stays where it was in the order)
            log.warning("The saved state of chat %s could not be marked as used: %s", path.stem, exc)

    def _drop(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("A saved chat state could not be removed: %s", exc)

    def _no_room(self, path: Path, size: int) -> None:
        log.info("The state of chat %s (%d MB) was not saved: the disk has no room to spare", path.stem, size >> 20)

    def _not_kept(self, path: Path, exc: Exception) -> None:
        log.warning("The state of chat %s was not saved: %s", path.stem, exc)

    def _refused(self, path: Path, exc: Exception) -> None:
        log.warning("The saved state of chat %s is ignored (llama.cpp refused it: %s); its history is read "
                    "instead", path.stem, exc)
        path.unlink(missing_ok=True)


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
