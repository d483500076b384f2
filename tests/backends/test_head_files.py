"""A float target's MTP head drafts from a compact Q8_0 copy (``app.backends.head_files``),
through the real loader, on tiny random-weight F16 models: the hybrid qwen35 and the
attention-only glm4moe. The reply is the target's own; the copy is made once and reused;
a copy that cannot be read is made again; one llama.cpp refuses leaves the engine plain
with one line and is forgotten; a quantised target keeps drafting with its own head."""

from __future__ import annotations

import logging
import os
import time

import pytest

from app.backends import head_files
from app.backends.head_files import compact_head_for
from app.backends.llama.backend import LlamaBackend
from app.backends.loader import load_pair
from app.engine.gguf.compact_head import compact_plan
from app.engine.gguf.model_file import open_model_file
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig
from app.storage import paths

from recurrent_models import MTP_ARCHITECTURES, write_mtp_model


@pytest.fixture(scope="module")
def float_models(demo_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("float-mtp")
    return {arch: write_mtp_model(folder / f"{arch}-mtp.F16.gguf", arch, vocab_from=demo_models.draft, ftype="F16")
            for arch in MTP_ARCHITECTURES}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _load(path):
    return load_pair(path, None, drafter=DrafterKind.MTP, n_ctx=1024, n_threads=1, target_gpu_layers=0)


def _ids(generation) -> list[int]:
    return [e.id for e in generation]


def _heads() -> list:
    folder = paths.mtp_heads_dir()
    return sorted(folder.glob("*.gguf")) if folder.exists() else []


@pytest.mark.parametrize("arch", MTP_ARCHITECTURES)
def test_a_float_target_drafts_from_a_compact_copy_and_says_what_the_target_alone_says(float_models, home, arch):
    pair = _load(float_models[arch])
    plain = LlamaBackend(float_models[arch], n_ctx=1024, n_threads=1)
    try:
        head = pair.engine.drafter.model
        assert head.compact_copy and "Q8_0" in head.name
        assert not pair.target.load_mtp  # the target's own MTP blocks stay on disk
        [copy] = _heads()
        tensors = {t.name: t for t in open_model_file(copy).header.tensors}
        assert "blk.0.attn_norm.weight" not in tensors  # an MTP-only file: the trunk's blocks left out
        assert tensors["output.weight"].ggml_type == 8  # Q8_0
        prompt = pair.target.tokenize("Once upon a time, in a land far away,", add_special=True, parse_special=False)
        more = pair.target.tokenize(" And then?", add_special=False, parse_special=False)
        drafted = accepted = 0
        turn = prompt
        for _ in range(2):
            g = pair.engine.generate(turn, SamplingConfig(), SpecConfig(draft_max=3), max_tokens=40)
            got = _ids(g)
            assert got == _ids(SpeculativeEngine(plain).generate(turn, SamplingConfig(), SpecConfig(enabled=False),
                                                                  max_tokens=40))
            assert g.stats.drafter == DrafterKind.MTP.value
            drafted, accepted = drafted + g.stats.drafted, accepted + g.stats.accepted
            turn = turn + got + more
        assert drafted > 20 and 0.05 < accepted / drafted < 0.95  # accept and reject paths both ran
    finally:
        pair.target.close()
        plain.close()


def test_the_copy_is_made_once_and_used_again(float_models, home, caplog):
    caplog.set_level(logging.INFO, "tandem.heads")
    target = open_model_file(float_models["qwen35"])
    first = compact_head_for(target)
    made = first.stat()
    assert any("wrote a compact MTP head" in r.getMessage() for r in caplog.records)
    caplog.clear()
    again = compact_head_for(target)
    assert again == first and again.stat().st_ino == made.st_ino
    assert not any("wrote" in r.getMessage() for r in caplog.records)


def test_an_unreadable_copy_is_made_again(float_models, home, caplog):
    target = open_model_file(float_models["qwen35"])
    copy = compact_head_for(target)
    size = copy.stat().st_size
    copy.write_bytes(b"GGUF" + b"\0" * 64)  # a cut or damaged file
    caplog.set_level(logging.WARNING, "tandem.heads")
    again = compact_head_for(target)
    assert again == copy and copy.stat().st_size == size
    assert [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]


def test_a_copy_llama_cpp_refuses_leaves_the_reply_plain_and_is_forgotten(float_models, home):
    source = float_models["qwen35"]
    target = open_model_file(source)
    plan, _ = compact_plan(target.architecture, {f"{target.architecture}.{k}": v for k, v in target.hparams.items()},
                           target.header.tensors)
    # A well-formed GGUF without the block's eh_proj: the header reads, llama.cpp's load refuses it.
    from app.engine.gguf.compact_head import write_compact_head
    crippled = type(plan)(plan.blocks, tuple(t for t in plan.tensors if "eh_proj" not in t[0]), plan.bytes,
                          plan.head_type)
    dest = paths.mtp_heads_dir() / head_files._file_name(target)
    dest.parent.mkdir(parents=True)
    write_compact_head(source, dest, crippled)
    pair = _load(source)
    try:
        assert pair.engine.drafter is None
        assert "its MTP head could not run" in pair.engine.note and "compact MTP head" in pair.engine.note
        assert "\n" not in pair.engine.note
        assert not dest.exists()  # made again at the next load
        g = pair.engine.generate(pair.target.tokenize("Hello", add_special=True, parse_special=False),
                                 SamplingConfig(), SpecConfig(draft_max=3), max_tokens=8)
        assert len(_ids(g)) == 8 and not g.stats.speculative
    finally:
        pair.target.close()


def test_a_quantised_target_drafts_with_its_own_head(mtp_models, home):
    pair = _load(mtp_models["qwen35"])
    try:
        assert not pair.engine.drafter.model.compact_copy and pair.target.load_mtp
        assert _heads() == []
    finally:
        pair.target.close()


def test_without_room_in_memory_the_target_drafts_with_its_own_head(float_models, home, monkeypatch, caplog):
    monkeypatch.setattr(head_files, "available_ram", lambda: 1 << 20)
    caplog.set_level(logging.WARNING, "tandem.heads")
    pair = _load(float_models["glm4moe"])
    try:
        assert not pair.engine.drafter.model.compact_copy and pair.target.load_mtp
        assert _heads() == []
        [line] = [r.getMessage() for r in caplog.records]
        assert "not leave enough memory" in line
    finally:
        pair.target.close()


def test_at_most_a_few_copies_are_kept_and_dead_writers_leave_nothing_behind(float_models, home):
    folder = paths.mtp_heads_dir()
    folder.mkdir(parents=True)
    for i in range(head_files.HEADS_KEPT + 2):
        (folder / f"old-{i}.gguf").write_bytes(b"x")
    dead, writing = folder / "x.gguf.1.partial", folder / "y.gguf.2.partial"
    dead.write_bytes(b"x")
    writing.write_bytes(b"x")
    long_ago = time.time() - head_files.STALE_PARTIAL_S - 60
    os.utime(dead, (long_ago, long_ago))
    made = compact_head_for(open_model_file(float_models["qwen35"]))
    assert len(_heads()) == head_files.HEADS_KEPT and made in _heads()
    assert not dead.exists() and writing.exists()  # another process may be writing that one
