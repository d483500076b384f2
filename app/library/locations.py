"""Where the user's GGUF files already are: LM Studio's and Ollama's model folders, the
Hugging Face hub cache, Tandem's own model folders (the demo pair, drafts it made), and
folders the user adds.

Each finder turns one place into ``Found`` files (a path and the name the user knows
the model by) without opening a model: this is a walk of directory entries, bounded in
depth and in entries, that never follows a directory link (a loop, or a link to ``/``,
must not keep a scan going). Files that are links (the hub cache's snapshots, pointing
into its blobs) are followed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.storage.safe_json import UnreadableFile, read_regular_file

LM_STUDIO = "LM Studio"
OLLAMA = "Ollama"
HUGGING_FACE = "Hugging Face"
FOLDER = "Folder"
TANDEM = "Tandem"  # files Tandem fetched, wrote or uses
MADE = "Made by Tandem"   # drafts made from a target (tandem make-draft), in the data folder

MAX_DEPTH = 6                # a user folder: models/<publisher>/<repo>/<quant>/file is deep enough
MAX_ENTRIES = 200_000        # directory entries looked at per place, so a folder like ~ ends
MAX_MANIFEST_BYTES = 1 << 20  # an Ollama manifest is a few hundred bytes
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_HOST = "registry.ollama.ai"
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")


@dataclass(frozen=True)
class Location:
    """One place to look: ``kind`` says how its files are laid out and named."""

    kind: str  # LM_STUDIO, OLLAMA, HUGGING_FACE, TANDEM or FOLDER
    path: Path


@dataclass(frozen=True)
class Found:
    path: Path    # the file to read (an Ollama blob, a hub snapshot link, a plain file)
    name: str     # what the user calls it: "qwen2.5:0.5b", "org/repo/file.gguf", the file name
    source: str   # the Location kind


def default_locations(environ: Mapping[str, str] | None = None, home: Path | None = None) -> list[Location]:
    """The usual places on this machine, those that exist, each once."""
    env = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    xdg_cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    candidates = [
        Location(LM_STUDIO, home / ".lmstudio" / "models"),
        Location(LM_STUDIO, xdg_cache / "lm-studio" / "models"),  # LM Studio before 0.3
        Location(OLLAMA, Path(env["OLLAMA_MODELS"]) if env.get("OLLAMA_MODELS") else home / ".ollama" / "models"),
        Location(HUGGING_FACE, _hub_cache(env, xdg_cache)),
    ]
    return unique_existing(candidates)


def unique_existing(locations: list[Location]) -> list[Location]:
    seen: set[str] = set()
    kept = []
    for location in locations:
        try:
            if not location.path.is_dir():
                continue
            key = os.path.realpath(location.path)
        except OSError:
            continue
        if key not in seen:
            seen.add(key)
            kept.append(location)
    return kept


def hub_cache_folder(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """The Hugging Face hub cache as huggingface_hub finds it (whether it exists or not)."""
    env = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    return _hub_cache(env, Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache")


def _hub_cache(env: Mapping[str, str], xdg_cache: Path) -> Path:
    # huggingface_hub's own order: HF_HUB_CACHE, then HF_HOME/hub, then ~/.cache/huggingface/hub.
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env["HUGGINGFACE_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return xdg_cache / "huggingface" / "hub"


def find(location: Location) -> Iterator[Found]:
    """The GGUF files of one place, as its owner names them."""
    if location.kind == OLLAMA:
        yield from _ollama(location.path)
    elif location.kind == HUGGING_FACE:
        yield from _hub(location.path)
    else:
        for path in gguf_files(location.path):
            yield Found(path, _relative_name(path, location.path), location.kind)


def gguf_files(root: Path, max_depth: int = MAX_DEPTH) -> Iterator[Path]:
    """``*.gguf`` under ``root`` (any case), not following directory links, bounded."""
    budget = MAX_ENTRIES
    stack = [(root, 0)]
    while stack and budget > 0:
        folder, depth = stack.pop()
        for entry in _listing(folder):
            budget -= 1
            if budget <= 0:
                return
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < max_depth and not entry.name.startswith("."):
                        stack.append((Path(entry.path), depth + 1))
                elif entry.name.lower().endswith(".gguf") and entry.is_file():  # a link to a file counts
                    yield Path(entry.path)
            except OSError:
                continue  # a dangling link, a permission problem: not a model


def _listing(folder: Path) -> list[os.DirEntry]:
    """A folder's entries by name; none when it cannot be read (the rest of the place
    still counts)."""
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError:
        return []


def _relative_name(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


# --- Ollama: blobs named through their manifests ---------------------------------------------

def _ollama(root: Path) -> Iterator[Found]:
    """manifests/<host>/<namespace>/<model>/<tag> is JSON naming the blobs; the layer whose
    mediaType is the model is the GGUF, at blobs/sha256-<hex>."""
    manifests = root / "manifests"
    for manifest in _files_at_depth(manifests, 4):
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        digest = _model_digest(manifest)
        if digest is None:
            continue
        blob = root / "blobs" / f"sha256-{digest}"
        if not blob.is_file():
            continue
        if host == OLLAMA_DEFAULT_HOST:
            name = f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
        else:
            name = f"{host}/{namespace}/{model}:{tag}"
        yield Found(blob, name, OLLAMA)


def _files_at_depth(root: Path, depth: int) -> Iterator[Path]:
    budget = MAX_ENTRIES
    level = [root]
    for step in range(depth):
        last = step == depth - 1  # folders down to the last level, files there
        below = []
        for folder in level:
            for entry in _listing(folder):
                budget -= 1
                if budget <= 0:
                    return
                try:
                    wanted = entry.is_file(follow_symlinks=False) if last \
                        else entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if wanted and not entry.name.startswith("."):
                    below.append(Path(entry.path))
        level = below
    yield from level


def _model_digest(manifest: Path) -> str | None:
    try:
        document = json.loads(read_regular_file(manifest, MAX_MANIFEST_BYTES).decode("utf-8"))
    except (OSError, UnreadableFile, ValueError, RecursionError):
        return None  # not a manifest Ollama wrote: nothing to name
    layers = document.get("layers") if isinstance(document, dict) else None
    for layer in layers if isinstance(layers, list) else ():
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER:
            match = _DIGEST.fullmatch(str(layer.get("digest", "")))
            if match:
                return match.group(1)
    return None


# --- the Hugging Face hub cache ---------------------------------------------------------------

def _hub(root: Path) -> Iterator[Found]:
    """models--<org>--<name>/snapshots/<revision>/...*.gguf, links into the repo's blobs."""
    try:
        repos = sorted(p for p in root.iterdir() if p.name.startswith("models--") and p.is_dir())
    except OSError:
        return
    for repo in repos:
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        for snapshot in _newest_first(repo / "snapshots"):
            for path in gguf_files(snapshot, max_depth=3):
                yield Found(path, f"{repo_id}/{path.relative_to(snapshot).as_posix()}", HUGGING_FACE)


def hub_file(name: str, environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path | None:
    """The Hub cache's file the library calls ``name`` ("org/repo/file.gguf", or
    "hf://org/repo/file.gguf"), newest revision first; None when it is not there."""
    name = name.removeprefix("hf://")
    parts = name.split("/")
    if len(parts) < 3 or any(p in ("", ".", "..") for p in parts) or "--" in parts[0] + parts[1]:
        return None
    repo = hub_cache_folder(environ, home) / f"models--{parts[0]}--{parts[1]}"
    for snapshot in _newest_first(repo / "snapshots"):
        path = snapshot.joinpath(*parts[2:])
        if path.is_file():
            return path
    return None


def _newest_first(folder: Path) -> list[Path]:
    # The same file in two revisions is one model: the scan keeps the first it meets.
    try:
        snapshots = [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []
    def modified(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0
    return sorted(snapshots, key=modified, reverse=True)
