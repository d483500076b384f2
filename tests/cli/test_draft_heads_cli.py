"""Real, loadable model files that carry heads trained to draft: check-pair and the library
say "not used yet: …" in one line for heads Tandem does not use, and the pair still works;
a target's own MTP head is said to draft, or why llama.cpp could not run it, and a target
whose head is malformed still generates (plain, saying why) instead of aborting."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from recurrent_models import write_recurrent_model

from app.engine.gguf.draft_heads import CANNOT_RUN, MEDUSA
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


def _tandem(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(tmp_path / "home"))
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=ROOT)


def _with_head(path: Path, arch: str, vocab_from: Path, **options) -> Path:
    return write_recurrent_model(path, arch, vocab_from=vocab_from, nextn=1, ftype="F32", mixer_gain=0.2,
                                 ffn_gain=0.1, head_noise=0.15, **options)


def test_check_pair_and_the_library_say_a_target_drafts_with_its_own_mtp_head(demo_models, tmp_path):
    target = _with_head(tmp_path / "qwen35-mtp.gguf", "qwen35", demo_models.draft)
    shown = _tandem(tmp_path, "check-pair", str(target), str(demo_models.draft))
    assert shown.returncode == 0, shown.stderr
    line = ("qwen35-mtp.gguf: drafts with its own MTP head (1 layer) when no draft model is named; "
            "--drafter mtp asks for it")
    assert line in shown.stdout.splitlines() and "not used yet" not in shown.stdout
    report = json.loads(_tandem(tmp_path, "check-pair", str(target), str(demo_models.draft), "--json").stdout)
    assert report["heads"] == [line] and report["not_used"] == []
    assert line.partition(": ")[2] in read_entry(target, target.name, "Folder").notes


def test_a_target_whose_mtp_head_would_abort_llama_cpp_is_said_so_and_runs_plain(demo_models, tmp_path):
    # Without eh_proj llama.cpp loads the file "trunk only" and aborts on the first MTP context
    # (tests/engine/gguf/test_draft_heads.py shows it): Tandem must not make one.
    target = _with_head(tmp_path / "glm-bad.gguf", "glm4moe", demo_models.draft, drop=["blk.4.nextn.eh_proj.weight"])
    why = CANNOT_RUN + "blk.4.nextn.eh_proj.weight is missing"
    report = json.loads(_tandem(tmp_path, "check-pair", str(target), str(demo_models.draft), "--json").stdout)
    assert report["compatible"] is True and report["heads"] == [f"glm-bad.gguf: {why}"]
    assert why in read_entry(target, target.name, "Folder").notes
    for asked in ((), ("--drafter", "mtp")):
        run = _tandem(tmp_path, "generate", "--target", str(target), *asked, "--prompt", "hi", "--max-tokens", "3")
        assert run.returncode == 0, run.stderr[-2000:]
        # Asked for or not (a target's own head drafts when no draft is named), the reply says why it is plain.
        assert "plain: " + why in run.stderr, run.stderr[-2000:]


def _generate(tmp_path: Path, target: Path, *args: str) -> dict:
    run = _tandem(tmp_path, "generate", "--target", str(target), "--json", "--temperature", "0", "--max-tokens", "40",
                  "--ignore-eos", "--prompt", "Once upon a time, in a land far away,", *args)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_generate_drafts_with_the_targets_own_head_unasked_or_named_and_writes_the_plain_text(mtp_models, tmp_path):
    for arch, target in mtp_models.items():
        plain = _generate(tmp_path, target, "--no-speculation")
        assert plain["stats"]["drafted"] == 0
        for asked in ((), ("--drafter", "mtp"), ("--drafter", "mtp", "--draft-max", "auto"),
                      ("--drafter", "mtp", "--draft-max", "3")):
            record = _generate(tmp_path, target, *asked)
            assert record["stats"]["drafter"] == "mtp", (arch, asked, record["stats"])
            assert record["stats"]["drafted"] > 0 and 0 < record["stats"]["accepted"] < record["stats"]["drafted"]
            assert record["text"] == plain["text"], (arch, asked)
            # A corrected token shows what the head proposed in its place.
            assert any(t["kind"] == "corrected" and t["draft"]["id"] != t["id"] for t in record["tokens"]), (arch, asked)


def test_a_two_turn_chat_drafts_with_the_head(mtp_models, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-m", "app", "-m", str(mtp_models["qwen35"]), "-c", "1024", "chat",
                           "--max-tokens", "12", "--temperature", "0"],
                          input="Hello there\nAnd again\n\n", capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    summaries = [line for line in done.stderr.splitlines() if line.startswith("[") and "tokens" in line]
    assert len(summaries) == 2 and all("mtp acceptance" in line for line in summaries), done.stderr[-2000:]
