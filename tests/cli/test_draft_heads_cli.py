"""A real, loadable model file that says it carries heads trained to draft: check-pair
and the library say "not used yet: …" in one line, and the pair still works."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from app.engine.gguf.draft_heads import MEDUSA
from app.engine.gguf.header import validate_gguf
from app.library.entries import read_entry

ROOT = Path(__file__).resolve().parents[2]


def with_medusa_key(source: Path, dest: Path) -> Path:
    """``source`` with one more metadata entry, ``medusa.num_heads = 4``, put first. The entry
    is 32 bytes (the alignment), so every tensor's data stays aligned where it was."""
    data = source.read_bytes()
    key = b"medusa.num_heads"
    entry = struct.pack("<Q", len(key)) + key + struct.pack("<II", 4, 4)  # UINT32, 4
    assert len(entry) == 32 and validate_gguf(source).alignment == 32
    (n_kv,) = struct.unpack_from("<Q", data, 16)
    dest.write_bytes(data[:16] + struct.pack("<Q", n_kv + 1) + entry + data[24:])
    return dest


def test_check_pair_and_the_library_say_heads_are_not_used_yet(demo_models, tmp_path):
    draft = with_medusa_key(demo_models.draft, tmp_path / "medusa-draft.gguf")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    shown = subprocess.run([sys.executable, "-m", "app", "check-pair", str(demo_models.target), str(draft)],
                           capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    compatible, note = shown.stdout.strip().splitlines()
    assert compatible.startswith("Compatible")
    assert note.startswith("medusa-draft.gguf: not used yet: it carries Medusa heads")
    as_json = subprocess.run([sys.executable, "-m", "app", "check-pair", str(demo_models.target), str(draft),
                              "--json"], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    report = json.loads(as_json.stdout)
    assert report["compatible"] is True and report["not_used"] == [note]

    entry = read_entry(draft, draft.name, "Folder")
    assert entry.usable and any(n.startswith("not used yet: it carries " + MEDUSA) for n in entry.notes)
    assert not any("not used yet" in n for n in read_entry(demo_models.draft, "plain", "Folder").notes)
