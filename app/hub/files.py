"""Naming a model on the Hub, as the terminal and the window spell it.

- ``hf://ORG/REPO/PATH/FILE.gguf`` (``@REVISION`` after the repository or at the end):
  one file;
- ``ORG/REPO:QUANT`` (llama-server's ``-hf`` spelling): the repository's file of that
  quantisation; ``ORG/REPO`` alone: the quantisation chosen for this machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.errors import TandemError

SCHEME = "hf://"
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# A quantisation in a file name: Q4_K_M, IQ4_XS, Q8_0, F16, BF16, MXFP4, UD-Q4_K_XL ...
_QUANT = re.compile(r"(?i)(?:^|[-_.])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|F16|F32|BF16|MXFP4(?:_MOE)?|TQ\d_\d))(?=[-_.]|$)")
SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


class HubNameError(TandemError):
    """A name that does not spell a repository or a file on the Hub."""


@dataclass(frozen=True)
class HubFile:
    """One file of one repository at one revision (None: the default branch)."""

    repo: str
    filename: str
    revision: str | None = None

    def __str__(self) -> str:
        at = f"@{self.revision}" if self.revision else ""
        return f"{SCHEME}{self.repo}{at}/{self.filename}"

    @property
    def quant(self) -> str:
        return quant_of(self.filename)


@dataclass(frozen=True)
class HubRepo:
    """A repository, and the quantisation asked for ('' : choose one)."""

    repo: str
    quant: str = ""
    revision: str | None = None


def is_hub_name(text: str) -> bool:
    return text.startswith(SCHEME)


def parse_file(text: str) -> HubFile:
    """``hf://ORG/REPO[@REV]/PATH.gguf`` or ``hf://ORG/REPO/PATH.gguf@REV``."""
    if not is_hub_name(text):
        raise HubNameError(f"{text!r} is not a Hub file (spell it hf://ORG/REPO/FILE.gguf)")
    rest = text[len(SCHEME):]
    parts = rest.split("/")
    if len(parts) < 3 or not all(parts):
        raise HubNameError(f"{text!r} names no file (spell it hf://ORG/REPO/FILE.gguf)")
    org, name, path = parts[0], parts[1], "/".join(parts[2:])
    revision = None
    if "@" in name:
        name, revision = name.split("@", 1)
    elif "@" in parts[-1]:
        path, revision = path.rsplit("@", 1)
    repo = f"{org}/{name}"
    _check_repo(repo, text)
    if revision is not None and not re.fullmatch(r"[A-Za-z0-9._/-]{1,100}", revision):
        raise HubNameError(f"{text!r}: {revision!r} is not a revision")
    if ".." in path.split("/") or not path.lower().endswith(".gguf"):
        raise HubNameError(f"{text!r} names no GGUF file (a path ending in .gguf)")
    return HubFile(repo, path, revision)


def parse_repo(text: str) -> HubRepo:
    """``ORG/REPO[:QUANT][@REV]``."""
    revision = None
    if "@" in text:
        text, revision = text.rsplit("@", 1)
    repo, _, quant = text.partition(":")
    _check_repo(repo, text)
    if quant and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", quant):
        raise HubNameError(f"{quant!r} is not a quantisation (Q4_K_M, Q8_0, F16 ...)")
    return HubRepo(repo, quant.upper(), revision)


def _check_repo(repo: str, text: str) -> None:
    if not _REPO.match(repo) or ".." in repo:
        raise HubNameError(f"{text!r} does not name a repository (spell it ORG/REPO)")


def size_text(n: float) -> str:
    """A download's size as every Hub surface shows it: MB under 0.1 GB, else GB."""
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def quant_of(filename: str) -> str:
    """The quantisation a file's name says (upper case), '' when it says none."""
    stem = filename.rsplit("/", 1)[-1]
    split = SPLIT.match(stem)
    stem = split.group("stem") if split else re.sub(r"(?i)\.gguf$", "", stem)
    found = _QUANT.findall(stem)
    return found[-1].upper() if found else ""


def first_part(filename: str) -> bool:
    """A file that stands for its model: a whole one, or a split model's first part."""
    split = SPLIT.match(filename.rsplit("/", 1)[-1])
    return split is None or int(split.group("part")) == 1


def parts_of(filename: str) -> list[str]:
    """Every part's name of the model whose first part is ``filename`` (itself alone when
    it is not split)."""
    folder, _, name = filename.rpartition("/")
    split = SPLIT.match(name)
    if split is None:
        return [filename]
    count = int(split.group("count"))
    prefix = f"{folder}/" if folder else ""
    return [f"{prefix}{split.group('stem')}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
