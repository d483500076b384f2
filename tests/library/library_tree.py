"""Builders of a model library on disk for tests: small real GGUF files (vocabulary only,
one tensor) in LM Studio's layout, Ollama's manifests and blobs, the Hugging Face hub
cache with its snapshot links, and a user folder with a split model and hostile files."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from gguf_factory import make_tokens, write_vocab_gguf  # tests/gguf_factory.py

TOKENS = make_tokens(64)


def model(path: Path, *, tokens=None, padding: int = 0, arch: str = "llama", **kw) -> Path:
    """A vocab-only GGUF with one small tensor; ``padding`` bytes of chat template make it bigger."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_vocab_gguf(path, TOKENS if tokens is None else tokens, arch=arch, tensor=True,
                            chat_template="x" * padding if padding else None, context_length=2048, **kw)


def ollama_blob(root: Path, name: str, tag: str, **kw) -> Path:
    staging = model(root / "staging.gguf", **kw)
    data = staging.read_bytes()
    staging.unlink()
    digest = hashlib.sha256(data).hexdigest()
    blob = root / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)},
    ]}))
    return blob


def hub_file(hub: Path, repo: str, filename: str, **kw) -> Path:
    folder = hub / ("models--" + repo.replace("/", "--"))
    blob = model(folder / "blobs" / hashlib.sha256(filename.encode()).hexdigest(), **kw)
    link = folder / "snapshots" / "abc123" / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def build_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    lms = home / ".lmstudio" / "models"
    model(lms / "bigco" / "Big-7B-GGUF" / "Big-7B-Q8_0.gguf", padding=40_000)           # the target
    model(lms / "bigco" / "Big-7B-GGUF" / "Big-0.5B-Q4_K_M.gguf", padding=4_000)        # same vocab, small
    model(lms / "bigco" / "Huge-GGUF" / "Huge-F16.gguf", padding=60_000)                # same vocab, bigger
    ollama_blob(home / ".ollama" / "models", "tiny", "latest", padding=1_000)           # same vocab, smallest
    hub = home / ".cache" / "huggingface" / "hub"
    hub_file(hub, "org/Near-GGUF", "near-q4_0.gguf", tokens=TOKENS + ["extra"], padding=2_000)  # vocab +1
    hub_file(hub, "org/Other-GGUF", "other-q4_0.gguf", arch="qwen2", padding=3_000)     # other family
    differs = list(TOKENS)
    differs[10] = "changed"
    hub_file(hub, "org/Diff-GGUF", "diff.gguf", tokens=differs, padding=500)            # token 10 differs
    hub_file(hub, "org/Wide-GGUF", "wide.gguf", tokens=make_tokens(400), padding=500)   # vocab size
    hub_file(hub, "org/Bos-GGUF", "bos.gguf", bos_id=0, padding=500)                    # special tokens
    return home


def build_folder(tmp_path: Path) -> Path:
    mine = tmp_path / "mine"
    model(mine / "Big-7B-Q8_0-00001-of-00002.gguf", padding=100)     # part 2 missing
    model(mine / "Whole-00001-of-00002.gguf", padding=100)
    model(mine / "Whole-00002-of-00002.gguf")
    (mine / "garbage.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)           # counts past the end
    (mine / "pointer.gguf").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\n")
    (mine / "empty.gguf").write_bytes(b"")
    (mine / "loop").symlink_to(mine)                                                    # never followed
    return mine


