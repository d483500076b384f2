"""``tools/make_recurrent_model.py`` writes a Gemma 4 target with its assistant and a
DFlash drafter (``gemma4 PATH --assistant A --dflash D``), a DFlash drafter for a Qwen 3.5
MTP target, and refuses the combinations llama.cpp cannot run; its other architectures
are written as before. (That the files load and agree: tests/models/test_gemma4_models.py
and test_dflash_models.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from gemma4_models import GEMMA4_QUIET
from gguf_arrays import read_gguf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("make_recurrent_model", ROOT / "tools" / "make_recurrent_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gemma4_with_its_assistant_and_a_dflash_drafter(tool, demo_models, tmp_path, capsys):
    target, assistant, drafter = tmp_path / "g4.gguf", tmp_path / "a.gguf", tmp_path / "d.gguf"
    assert tool.main(["gemma4", str(target), "--assistant", str(assistant), "--dflash", str(drafter),
                      "--vocab-from", str(demo_models.draft), "--block-size", "4"]) == 0
    printed = capsys.readouterr().out
    for path in (target, assistant, drafter):
        assert str(path) in printed and path.stat().st_size < 12e6
    t, a, d = read_gguf(target), read_gguf(assistant), read_gguf(drafter)
    assert (t.arch, a.arch, d.arch) == ("gemma4", "gemma4-assistant", "dflash")
    # Asking for a drafter makes the trunk quiet, which is what the drafters agree with.
    assert np.allclose(t.array("blk.0.post_attention_norm.weight"), GEMMA4_QUIET["mixer_gain"])
    assert a.value("embedding_length_out") == t.value("embedding_length") != a.value("embedding_length")
    assert d.value("block_size") == 4 and d.value("embedding_length") == t.value("embedding_length")
    assert a.tokenizer()["tokenizer.ggml.tokens"] == t.tokenizer()["tokenizer.ggml.tokens"]


def test_a_plain_gemma4_target_and_its_sizes(tool, demo_models, tmp_path):
    target = tmp_path / "g4.gguf"
    assert tool.main(["gemma4", str(target), "--vocab-from", str(demo_models.draft),
                      "--set", "n_layer=8", "--set", "sliding_window=64"]) == 0
    t = read_gguf(target)
    assert t.value("block_count") == 8 and t.value("attention.sliding_window") == 64
    assert t.value("attention.sliding_window_pattern") == [True, False, True, True, True, True, True, False]
    assert np.allclose(t.array("blk.0.post_attention_norm.weight"), 1.5)  # not quiet


def test_a_dflash_drafter_for_a_qwen35_mtp_target(tool, demo_models, tmp_path):
    target, drafter = tmp_path / "q.gguf", tmp_path / "d.gguf"
    assert tool.main(["qwen35", str(target), "--mtp", "--dflash", str(drafter),
                      "--vocab-from", str(demo_models.draft)]) == 0
    assert read_gguf(target).value("nextn_predict_layers") == 1
    assert read_gguf(drafter).value("target_layers") == [1, 2, 3]


@pytest.mark.parametrize("argv", [
    ["mamba", "x.gguf", "--dflash", "d.gguf"],       # llama.cpp hands no layer inputs out of mamba
    ["qwen35", "x.gguf", "--assistant", "a.gguf"],   # a Gemma 4 assistant reads a Gemma 4 target only
    ["gemma4", "x.gguf", "--dflash", "d.gguf", "--block-size", "1"],
    ["gemma4", "x.gguf", "--eagle3", "e.gguf"],
    ["gemma4", "x.gguf", "--set", "n_layers=3"],
])
def test_it_refuses_what_llama_cpp_cannot_run(tool, demo_models, tmp_path, argv, capsys):
    argv = [str(tmp_path / a) if a.endswith(".gguf") else a for a in argv]
    with pytest.raises(SystemExit) as raised:
        tool.main([*argv, "--vocab-from", str(demo_models.draft)])
    assert raised.value.code != 0
    assert not (tmp_path / "d.gguf").exists() and not (tmp_path / "a.gguf").exists()


def test_the_list_names_gemma4_beside_the_others(tool, capsys):
    assert tool.main(["--list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names[-1] == "gemma4" and {"mamba", "qwen35", "glm4moe"} <= set(names)
