"""Fetching a model into the Hugging Face cache: resumed, verified, and never half there.

huggingface_hub's own ``hf_hub_download`` checks a file's size, not its hash, resumes
only inside one process and deletes what it had when a download fails (its
``file_download.py``). A model is gigabytes, so Tandem downloads the bytes itself:

- into ``blobs/<sha256>.tandem-partial`` in the repository's cache folder, which
  outlives a cancel, a crash or a restart, and is resumed with a Range request;
- retrying a 429, a 5xx or a dropped connection with backoff, from where it stopped;
- hashing as it writes, and comparing with the sha256 the Hub advertises for the file
  (its ``X-Linked-Etag``, the LFS oid): a file that does not match is deleted;
- after checking the free disk first; a disk that fills anyway deletes the partial file.

The finished blob is then linked into ``snapshots/<commit>/`` by ``hf_hub_download``
itself (it finds the blob and downloads nothing), so the cache is laid out exactly as
huggingface_hub lays it out and every tool, the library included, sees the file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from app.hub.connection import (HubError, HubUnreachable, auth_headers, endpoint, hub_errors, raise_for_status,
                                retrying, session, timeout)
from app.hub.files import HubFile, parts_of, size_text
from app.hub.remote_header import url_of

PARTIAL = ".tandem-partial"
CHUNK = 1 << 20            # bytes written (and hashed) per read
DISK_MARGIN = 256 << 20    # bytes left free after the download: the system needs some too
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")

# (what, bytes done, bytes in all) -> False to cancel
Progress = Callable[[str, float, float], bool | None]


class DownloadCancelled(HubError):
    """Stopped by the user; what was downloaded is kept and the next pull resumes it."""


@dataclass(frozen=True)
class Pulled:
    path: Path          # the snapshot link the library and the loader read (a split model: its first part)
    file: HubFile
    size: int           # bytes of every part
    downloaded: int     # bytes fetched by this pull (0: all were in the cache)
    resumed: int        # bytes a kept partial download already had
    verified: bool      # every part's hash matched the Hub's sha256 (or git oid)


def hub_cache() -> Path:
    """The Hub's cache folder, in huggingface_hub's order (the library reads the same)."""
    from app.library.locations import hub_cache_folder

    return hub_cache_folder()


def free_disk() -> int:
    """Bytes free where the Hub cache is (or would be made)."""
    folder = hub_cache()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def repo_folder(repo: str) -> Path:
    return hub_cache() / ("models--" + repo.replace("/", "--"))


def pull(file: HubFile, progress: Progress | None = None, *, sleep: Callable[[float], None] = time.sleep) -> Pulled:
    """Download ``file`` (every part of a split model) into the Hub cache, or find it
    there; HubError in one line, DownloadCancelled when ``progress`` returned False."""
    report = progress or (lambda what, done, total: None)
    names = parts_of(file.filename)
    try:
        metas = [_metadata(replace(file, filename=name)) for name in names]
    except HubUnreachable:
        here = _cached(file, names)
        if here is None:
            raise
        report(f"{file.filename.rsplit('/', 1)[-1]} is already downloaded (the Hub is out of reach)", 1, 1)
        return here
    total = sum(m.size for m in metas)
    done_before = 0
    downloaded = resumed = 0
    verified = True
    first: Path | None = None
    for name, meta in zip(names, metas):
        part = replace(file, filename=name)
        shown = name.rsplit("/", 1)[-1]

        def part_report(what: str, done: float, _total: float, base=done_before) -> bool | None:
            return report(what, base + done, total)

        path, got, kept, checked = _pull_one(part, meta, part_report, shown, sleep)
        downloaded += got
        resumed += kept
        verified = verified and checked
        done_before += meta.size
        first = first or path
    assert first is not None
    return Pulled(first, file, total, downloaded, resumed, verified)


@dataclass(frozen=True)
class _Meta:
    etag: str
    commit: str
    size: int


def _cached(file: HubFile, names: list[str]) -> Pulled | None:
    """``file`` as an earlier pull left it in the cache (every part, the newest
    revision), for a pull while the Hub cannot be reached; None when it is not all there."""
    from app.library.locations import hub_file

    paths = [hub_file(f"{file.repo}/{name}") for name in names]
    if any(p is None for p in paths) or len({p.parent for p in paths}) != 1:
        return None
    size = sum(p.stat().st_size for p in paths)
    return Pulled(paths[0], file, size, 0, 0, True)


def _metadata(file: HubFile) -> _Meta:
    from huggingface_hub import get_hf_file_metadata

    with hub_errors(f"{file}"):
        meta = retrying(lambda: get_hf_file_metadata(url_of(file), timeout=30, endpoint=endpoint()))
    if not meta.etag or not meta.commit_hash or meta.size is None:
        raise HubError(f"{file}: the Hub did not say its size, revision and hash; not downloaded")
    if not re.fullmatch(r"[0-9A-Za-z._-]{1,128}", meta.etag) or not re.fullmatch(r"[0-9a-f]{40}", meta.commit_hash):
        raise HubError(f"{file}: the Hub's hash or revision is malformed; not downloaded")
    return _Meta(meta.etag, meta.commit_hash, int(meta.size))


def _pull_one(file: HubFile, meta: _Meta, report: Progress, shown: str,
              sleep: Callable[[float], None]) -> tuple[Path, int, int, bool]:
    """(snapshot path, bytes downloaded, bytes resumed, verified) of one file."""
    storage = repo_folder(file.repo)
    pointer = storage / "snapshots" / meta.commit / file.filename
    if pointer.exists():
        report(f"{shown} is already downloaded", meta.size, meta.size)
        return pointer, 0, 0, True
    blob = storage / "blobs" / meta.etag
    partial = blob.with_name(meta.etag + PARTIAL)
    got = kept = 0
    verified = True
    if not blob.exists():
        blob.parent.mkdir(parents=True, exist_ok=True)
        kept = _kept_bytes(partial, meta.size)
        _check_disk(blob.parent, meta.size - kept, file)
        hasher = _hasher(meta.etag, meta.size)
        if kept:
            _hash_existing(partial, hasher, report, shown, meta.size)
        got, hasher = _fetch(file, partial, hasher, kept, meta.size, report, shown, sleep)
        size_now = partial.stat().st_size
        if size_now != meta.size:
            partial.unlink(missing_ok=True)
            raise HubError(f"{file}: downloaded {size_now:,} bytes, the Hub said {meta.size:,}; deleted, try again")
        if hasher is not None and hasher.hexdigest() != meta.etag:
            partial.unlink(missing_ok=True)
            raise HubError(f"{file}: the download does not match the Hub's hash ({hasher.name}); it was deleted")
        verified = hasher is not None
        os.chmod(partial, 0o644 & ~_umask())
        os.replace(partial, blob)
    report(f"linking {shown}", meta.size, meta.size)
    return _link(file, meta, pointer), got, kept, verified


def _kept_bytes(partial: Path, size: int) -> int:
    try:
        kept = partial.stat().st_size
    except FileNotFoundError:
        return 0
    if kept > size:  # not this file's beginning: start again
        partial.unlink(missing_ok=True)
        return 0
    return kept


def _check_disk(folder: Path, needed: int, file: HubFile) -> None:
    free = shutil.disk_usage(folder).free
    if needed + DISK_MARGIN > free:
        raise HubError(f"{file}: not enough free disk in {folder.parent.parent}: it needs {size_text(needed)} more, "
                       f"{size_text(free)} is free")



def _hasher(etag: str, size: int):
    """The hash the Hub's etag is: an LFS file's sha256, or a git blob's sha1 (of its
    header and bytes); None for an etag that is neither (a mirror's own): size only."""
    if _SHA256.match(etag):
        return hashlib.sha256()
    if _GIT_SHA1.match(etag):
        git = hashlib.sha1()
        git.update(f"blob {size}\0".encode())
        return git
    return None


def _hash_existing(partial: Path, hasher, report: Progress, shown: str, size: int) -> None:
    if hasher is None:
        return
    done = 0
    with open(partial, "rb") as f:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
            done += len(chunk)
            report(f"checking what was downloaded of {shown}", done, size)


def _fetch(file: HubFile, partial: Path, hasher, kept: int, size: int, report: Progress, shown: str,
           sleep: Callable[[float], None]):
    """Append the rest of ``file`` to ``partial`` (from ``kept`` bytes), hashing it;
    returns the bytes downloaded and the hasher that saw the whole file (a new one when
    the server ignored the range and the file started again). Retries resume where the
    last try stopped."""
    url = url_of(file)
    state = {"have": kept, "got": 0, "hasher": hasher, "cancelled": False}

    def attempt() -> None:
        have = state["have"]
        if have >= size:
            return
        headers = auth_headers()
        if have:
            headers["Range"] = f"bytes={have}-"
        with session().stream("GET", url, headers=headers, timeout=timeout(), follow_redirects=True) as response:
            raise_for_status(response)
            mode = "ab"
            if have and response.status_code == 200:  # the range was ignored: the whole file again
                have = state["have"] = 0
                state["hasher"] = _hasher_like(state["hasher"], size)
                mode = "wb"
            with open(partial, mode) as out:
                for chunk in response.iter_bytes(CHUNK):
                    if have + len(chunk) > size:
                        raise HubError(f"{file}: the Hub sent more bytes than the file has")
                    out.write(chunk)
                    if state["hasher"] is not None:
                        state["hasher"].update(chunk)
                    have += len(chunk)
                    state["have"] = have
                    state["got"] += len(chunk)
                    if report(f"downloading {shown}", have, size) is False:
                        state["cancelled"] = True
                        return

    try:
        with hub_errors(f"{file}"):
            retrying(attempt, sleep=sleep, stop=lambda: state["cancelled"])
    except HubError as exc:
        if state["have"] > kept and state["have"] < size:  # what came is kept: say so
            raise HubError(f"{exc}; the download stopped at {size_text(state['have'])} of {size_text(size)} and is kept: "
                           "'tandem pull' or Download again resumes it") from None
        raise
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            partial.unlink(missing_ok=True)
            raise HubError(f"{file}: the disk filled up during the download; the partial file was deleted") from None
        raise HubError(f"{file}: could not write the download ({exc.strerror or exc})") from None
    if state["cancelled"]:
        raise DownloadCancelled(f"{file}: download cancelled at {size_text(state['have'])} of {size_text(size)}; "
                                "'tandem pull' or Download again resumes it")
    if state["have"] < size:
        raise HubError(f"{file}: the Hub ended the download at {size_text(state['have'])} of {size_text(size)}; "
                       "run it again to resume")
    return state["got"], state["hasher"]


def _hasher_like(hasher, size: int):
    """A fresh hasher of ``hasher``'s kind, for a download that starts again at byte 0."""
    if hasher is None:
        return None
    fresh = hashlib.new(hasher.name)
    if hasher.name == "sha1":
        fresh.update(f"blob {size}\0".encode())
    return fresh


def _link(file: HubFile, meta: _Meta, pointer: Path) -> Path:
    """The snapshot link to the blob, by huggingface_hub itself, and the branch's ref."""
    from huggingface_hub import hf_hub_download

    with hub_errors(f"{file}"):
        path = retrying(lambda: hf_hub_download(file.repo, file.filename, revision=meta.commit,
                                                cache_dir=hub_cache(), endpoint=endpoint()))
    branch = file.revision or "main"
    if branch != meta.commit:
        ref = repo_folder(file.repo) / "refs" / branch
        try:
            ref.parent.mkdir(parents=True, exist_ok=True)
            ref.write_text(meta.commit)
        except OSError:
            pass  # a ref is a convenience: the snapshot is there either way
    return Path(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
