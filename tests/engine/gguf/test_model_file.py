"""app.engine.gguf.model_file: a model path resolved once, its header read once.

Real files in tmp_path (symlinks, folders, FIFOs, GGUFs written by the gguf package);
nothing is mocked.
"""

from __future__ import annotations

import os
import sys

import pytest

from app.engine.gguf import header as gguf_header
from app.engine.errors import ModelFileError
from app.engine.gguf.memory_kinds import ATTENTION, HYBRID, RECURRENT, memory_kind
from app.engine.gguf.model_file import FileIdentity, ModelFile, forget_opened_files, open_model_file

from gguf_factory import make_tokens, write_vocab_gguf


def refused(path, *fragments: str) -> str:
    with pytest.raises(ModelFileError) as info:
        open_model_file(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(os.path.basename(path) + ": "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_a_model_opens_with_its_facts(tmp_path):
    path = write_vocab_gguf(tmp_path / "m.gguf")
    model = open_model_file(path)
    assert model.path == path and model.resolved == path.resolve()
    assert model.identity == FileIdentity.of(os.stat(path))
    assert model.metadata.n_vocab == model.n_vocab > 0
    assert model.header.file_size == path.stat().st_size
    assert model.memory_kind == ATTENTION and model.unchanged()
    assert open_model_file(model) is model  # a ModelFile passes through
    assert os.fspath(model) == str(path)


def test_through_a_symlink_messages_name_the_link_and_the_file_is_resolved(tmp_path):
    blob = write_vocab_gguf(tmp_path / "sha256-0123abcd")
    link = tmp_path / "friendly.gguf"
    link.symlink_to(blob.name)
    model = open_model_file(link)
    assert model.path == link and model.resolved == blob.resolve()
    assert model.metadata.name  # named after the link when the file has no general.name
    blob.write_bytes(b"not a model any more")
    forget_opened_files()
    refused(link, "is not a GGUF file")  # the link's name, not the blob's


def test_an_unchanged_file_is_walked_once_a_changed_one_again(tmp_path, monkeypatch):
    walks = []
    walk = gguf_header._walk
    monkeypatch.setattr(gguf_header, "_walk", lambda *a: walks.append(a[0]) or walk(*a))
    path = write_vocab_gguf(tmp_path / "m.gguf")
    forget_opened_files()
    first = open_model_file(path)
    other_name = tmp_path / "alias.gguf"
    other_name.symlink_to(path)
    assert open_model_file(other_name).header is first.header and len(walks) == 1
    write_vocab_gguf(path, make_tokens(300))  # rewritten: another file
    assert not first.unchanged()
    assert open_model_file(path).n_vocab == 300 and len(walks) == 2


@pytest.mark.parametrize("case", ["loop", "self-loop", "dangling", "directory", "fifo", "missing",
                                  "file as folder"])
def test_paths_that_name_no_model_are_one_line(tmp_path, case):
    path = tmp_path / "model.gguf"
    expected = {
        "loop": "is a symlink loop", "self-loop": "is a symlink loop",
        "dangling": "is a symlink to nowhere.gguf, which does not exist",
        "directory": "is a directory", "fifo": "is not a regular file", "missing": "does not exist",
        "file as folder": "a part of its path is a file",
    }[case]
    if case == "loop":
        (tmp_path / "other.gguf").symlink_to(path)
        path.symlink_to(tmp_path / "other.gguf")
    elif case == "self-loop":
        path.symlink_to(path.name)
    elif case == "dangling":
        path.symlink_to("nowhere.gguf")
    elif case == "directory":
        path.mkdir()
    elif case == "fifo":
        os.mkfifo(path)  # opening it would block: refused before any open
    elif case == "file as folder":
        (tmp_path / "plain").write_text("x")
        path = tmp_path / "plain" / "model.gguf"
    refused(path, expected)


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root and Windows ignore mode bits")
def test_a_folder_that_cannot_be_entered_is_one_line(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    write_vocab_gguf(folder / "m.gguf")
    folder.chmod(0)
    try:
        refused(folder / "m.gguf", "permission denied")
    finally:
        folder.chmod(0o755)


def test_memory_kinds_follow_llama_cpps_architecture_tables():
    assert memory_kind("llama") == ATTENTION and memory_kind("") == ATTENTION
    assert memory_kind("mamba") == memory_kind("rwkv7") == RECURRENT
    assert memory_kind("qwen35") == memory_kind("lfm2") == memory_kind("granitehybrid") == HYBRID


def test_the_vendored_llama_cpp_agrees_with_the_tables():
    """The tables are llama.cpp's llm_arch_is_recurrent / _is_hybrid, read from its source
    where it is unpacked (skipped elsewhere)."""
    import re
    from pathlib import Path

    source = Path("/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama-arch.cpp")
    if not source.exists():
        pytest.skip("the vendored llama.cpp source is not unpacked here")
    text = source.read_text()
    names = dict(re.findall(r'\{\s*(LLM_ARCH_\w+),\s*"([^"]+)"\s*\}', text))

    def listed(function: str) -> set[str]:
        body = text.split(f"bool {function}(const llm_arch & arch)", 1)[1].split("default:", 1)[0]
        return {names[a] for a in re.findall(r"case (LLM_ARCH_\w+):", body)}

    assert {a for a in listed("llm_arch_is_recurrent")} == {a for a in names.values() if memory_kind(a) == RECURRENT}
    assert {a for a in listed("llm_arch_is_hybrid")} == {a for a in names.values() if memory_kind(a) == HYBRID}


def test_model_file_is_immutable(tmp_path):
    model = open_model_file(write_vocab_gguf(tmp_path / "m.gguf"))
    with pytest.raises(AttributeError):
        model.memory_kind = RECURRENT  # type: ignore[misc]
    assert isinstance(model, ModelFile)
