"""A target's MTP head judged from its header alone (engine/gguf/draft_heads.py): a head
llama.cpp can run passes, a malformed one is refused in one line before llama.cpp could
abort on it, and the verdict reaches ``ModelMetadata`` through the real header reader.
Real files from tests/recurrent_models.py (qwen35 and glm4moe with runnable MTP heads)
and tiny files written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from gguf_factory import make_tokens
from recurrent_models import write_mtp_model, write_recurrent_model

from app.engine.errors import ModelFileError
from app.engine.gguf.draft_heads import (
    CANNOT_RUN, DFLASH, EAGLE3, GEMMA4_ASSISTANT, MEDUSA, MTP, MTP_ARCHITECTURES, NO_MTP_HEAD, head_lines,
    is_head_key, mtp_head_problem, mtp_layers, trained_heads,
)
from app.engine.gguf.meta import read_metadata

ROOT = Path(__file__).resolve().parents[3]
# A head that agrees with its trunk part of the time (as the backend's tests write it).
HEAD = dict(nextn=1, ftype="F32", mixer_gain=0.2, ffn_gain=0.1, head_noise=0.15)
DRAFTS = "drafts with its own MTP head (1 layer) when no draft model is named; --drafter mtp asks for it"


def _write(tmp_path: Path, arch: str, vocab: Path, name: str = "t.gguf", **options) -> Path:
    return write_recurrent_model(tmp_path / name, arch, vocab_from=vocab, **{**HEAD, **options})


def _lines(meta) -> tuple[str, ...]:
    return head_lines(meta.architecture, meta.draft_heads, meta.mtp_layers, meta.mtp_problem)


def _tiny(path: Path, arch: str, *, layers: int = 4, keys: dict | None = None, tensors: tuple[str, ...] = ()) -> Path:
    """A small file of any architecture: a vocabulary, an attn_norm per block, ``tensors``."""
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(layers)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(make_tokens(64))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for key, value in (keys or {}).items():
        w.add_uint32(key, value)
    w.add_tensor("token_embd.weight", np.zeros((64, 8), dtype=np.float32))
    for name in [f"blk.{i}.attn_norm.weight" for i in range(layers)] + list(tensors):
        w.add_tensor(name, np.zeros(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- real files through the header reader ---------------------------------------------


@pytest.mark.parametrize("arch", ["qwen35", "glm4moe"])
def test_a_head_llama_cpp_can_run_passes(demo_models, tmp_path, arch):
    meta = read_metadata(_write(tmp_path, arch, demo_models.draft))
    assert (meta.mtp_layers, meta.mtp_problem, meta.draft_heads) == (1, None, (MTP,))
    assert _lines(meta) == (DRAFTS,)


@pytest.mark.parametrize("arch, options, why", [
    ("qwen35", dict(drop=["blk.4.nextn.eh_proj.weight"]), "blk.4.nextn.eh_proj.weight is missing"),
    ("glm4moe", dict(drop=["blk.4.nextn.hnorm.weight"]), "blk.4.nextn.hnorm.weight is missing"),
    ("qwen35", dict(nextn=2), "this llama.cpp runs one MTP block of qwen35, the file has 2"),
    ("glm4moe", dict(drop=["blk.4.ffn_gate_inp.weight"]), "blk.4.ffn_gate_inp.weight is missing"),
    ("glm4moe", dict(keys={"leading_dense_block_count": 5}),
     "blk.4 is a dense block (leading_dense_block_count 5); llama.cpp's glm4moe MTP graph needs a routed one"),
    ("glm4moe", dict(keys={"nextn_predict_layers": None}),
     "it carries nextn tensors but no 'glm4moe.nextn_predict_layers'"),
    ("qwen35", dict(keys={"attention.value_length": 8}),
     "llama.cpp's qwen35 MTP graph needs equal key and value head sizes (the file has 16 and 8)"),
])
def test_a_malformed_head_is_refused_in_one_line(demo_models, tmp_path, arch, options, why):
    meta = read_metadata(_write(tmp_path, arch, demo_models.draft, **options))
    assert meta.mtp_problem == CANNOT_RUN + why
    assert meta.draft_heads == (MTP,) and _lines(meta) == (CANNOT_RUN + why,)


def test_more_heads_than_blocks_is_refused_by_the_header_and_by_the_head_check(demo_models, tmp_path):
    with pytest.raises(ModelFileError, match="nextn_predict_layers' is 9, more than the 5 layers"):
        read_metadata(_write(tmp_path, "qwen35", demo_models.draft, keys={"nextn_predict_layers": 9}))
    values = {"qwen35.block_count": 2, "qwen35.nextn_predict_layers": 3}
    assert mtp_head_problem("qwen35", values, ["blk.0.attn_norm.weight"]) == \
        CANNOT_RUN + "nextn_predict_layers 3 exceeds block_count 2"


def test_nextn_tensors_on_an_architecture_without_an_mtp_graph(demo_models, tmp_path):
    llama = read_metadata(_tiny(tmp_path / "llama.gguf", "llama", keys={"llama.nextn_predict_layers": 1},
                                tensors=("blk.3.nextn.eh_proj.weight",)))
    assert (llama.mtp_layers, llama.mtp_problem) == (1, CANNOT_RUN + "llama.cpp has no MTP graph for 'llama'")
    assert _lines(llama) == (llama.mtp_problem,)
    mamba = read_metadata(_write(tmp_path, "mamba", demo_models.draft, name="mamba.gguf"))
    assert mamba.mtp_problem == CANNOT_RUN + "llama.cpp has no MTP graph for 'mamba'"


def test_a_file_without_a_head_says_so_and_gets_no_line(demo_models, tmp_path):
    meta = read_metadata(_write(tmp_path, "qwen35", demo_models.draft, nextn=0))
    assert (meta.mtp_layers, meta.mtp_problem, meta.draft_heads, _lines(meta)) == (0, NO_MTP_HEAD, (), ())


@pytest.mark.parametrize("arch, what", [("dflash", DFLASH), ("gemma4-assistant", GEMMA4_ASSISTANT)])
def test_drafter_files_that_read_hidden_states_are_not_used_yet(tmp_path, arch, what):
    meta = read_metadata(_tiny(tmp_path / "d.gguf", arch))
    assert meta.draft_heads and meta.mtp_layers == 0
    (line,) = _lines(meta)
    assert line.startswith(f"not used yet: {what}, which ") and line.endswith("; this build of Tandem cannot "
                                                                              "run it yet")
    assert ("block of tokens" if arch == "dflash" else "attention cache") in line


def test_an_eagle3_drafter_file_says_it_drafts_when_named(tmp_path):
    meta = read_metadata(_tiny(tmp_path / "d.gguf", "eagle3", tensors=("d2t",)))
    assert meta.draft_heads and meta.mtp_layers == 0
    assert _lines(meta) == ("an EAGLE-3 drafter: drafts for the target it was trained on, reading that target's "
                            "layers; name it as the draft",)


def test_an_mtp_head_beside_medusa_heads_gets_a_line_each():
    lines = head_lines("qwen35", (MTP, MEDUSA), 1, None)
    assert lines == (DRAFTS, "not used yet: it carries Medusa heads, trained to draft; Tandem drafts with a "
                             "separate draft model, copies or a target's own MTP head for now")
    assert head_lines("llama", (EAGLE3,))[0].startswith("not used yet: it carries an EAGLE-3 head")


# -- the checks, on names alone -------------------------------------------------------


def _names(first: int, blocks: int, *per_block: str) -> list[str]:
    """A trunk probe, and every MTP block's nextn tensors plus ``per_block``."""
    return ["blk.0.attn_norm.weight"] + [
        f"blk.{i}.{t}" for i in range(first, blocks)
        for t in ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", *per_block)]


def _keys(arch: str, blocks: int, nextn: int, **more) -> dict:
    return {f"{arch}.block_count": blocks, f"{arch}.nextn_predict_layers": nextn,
            **{f"{arch}.{k.replace('__', '.')}": v for k, v in more.items()}}


def test_the_mtp_blocks_are_the_last_ones_and_each_is_checked():
    # mimo2 runs several blocks; every one must be whole, and a nextn tensor on a trunk block is refused.
    extra = ("attn_qkv.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
    values = _keys("mimo2", 6, 2)
    names = _names(4, 6, *extra)
    assert mtp_head_problem("mimo2", values, names) is None and mtp_layers("mimo2", values) == 2
    assert mtp_head_problem("mimo2", values, [n for n in names if n != "blk.5.attn_qkv.weight"]) == \
        CANNOT_RUN + "blk.5.attn_qkv.weight is missing"
    assert mtp_head_problem("mimo2", values, names + ["blk.1.nextn.enorm.weight"]) == \
        CANNOT_RUN + "blk.1.nextn.enorm.weight lies outside the MTP blocks (blk.4 to blk.5)"
    assert mtp_head_problem("mimo2", _keys("mimo2", 2, 2), _names(0, 2, *extra)) == \
        CANNOT_RUN + "nextn_predict_layers 2 leaves no trunk of the 2 blocks"
    assert mtp_head_problem("mimo2", values, names[1:]) == \
        CANNOT_RUN + "blk.0.attn_norm.weight is missing: the file holds an MTP head without its trunk"


def test_a_split_file_is_judged_from_the_part_read_and_says_so():
    values = {**_keys("qwen35", 5, 1, embedding_length=64, attention__head_count=4), "split.count": 3}
    assert mtp_head_problem("qwen35", values, ["blk.0.attn_norm.weight"]) == CANNOT_RUN + (
        "blk.4.nextn.eh_proj.weight is missing (a split file: Tandem reads the tensors of its first part of 3 only)")
    assert mtp_head_problem("qwen35", values, _names(4, 5)) is None  # the head happens to be in this part
    assert is_head_key("split.count")


def test_deepseek2_needs_mla_a_q_lora_rank_no_temperature_and_its_experts_fused_or_apart():
    arch = "deepseek2"
    per_block = ("attn_q_a.weight", "attn_q_a_norm.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight",
                 "attn_kv_a_norm.weight", "attn_k_b.weight", "ffn_norm.weight", "ffn_gate_inp.weight",
                 "ffn_down_exps.weight", "ffn_gate_shexp.weight", "ffn_down_shexp.weight", "ffn_up_shexp.weight")
    values = _keys(arch, 4, 1, attention__key_length_mla=192, attention__value_length_mla=128,
                   attention__q_lora_rank=64, leading_dense_block_count=1)
    split = _names(3, 4, *per_block, "ffn_gate_exps.weight", "ffn_up_exps.weight")
    assert mtp_head_problem(arch, values, split) is None
    assert mtp_head_problem(arch, values, _names(3, 4, *per_block, "ffn_gate_up_exps.weight")) is None
    assert mtp_head_problem(arch, values, [n for n in split if "ffn_up_exps" not in n]) == CANNOT_RUN + (
        "blk.3 has neither ffn_gate_up_exps.weight nor ffn_gate_exps.weight + ffn_up_exps.weight")
    for key, value, why in (
            ("deepseek2.attention.key_length_mla", None, "needs MLA"),
            ("deepseek2.attention.q_lora_rank", None, "needs 'deepseek2.attention.q_lora_rank' above 0"),
            ("deepseek2.attention.temperature_scale", 0.1, "takes no attention temperature scale")):
        changed = {k: v for k, v in {**values, key: value}.items() if v is not None}
        assert why in mtp_head_problem(arch, changed, split), key


@pytest.mark.parametrize("arch", ["hy_v3", "step35"])
def test_a_head_whose_graph_picks_its_feed_forward_needs_the_one_it_picks(arch):
    dense = ("ffn_up.weight", "ffn_gate.weight", "ffn_down.weight")
    routed = ("ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
              "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight")
    values = _keys(arch, 3, 1, embedding_length=64, attention__head_count=4)
    assert mtp_head_problem(arch, values, _names(2, 3, *dense)) is None
    assert mtp_head_problem(arch, values, _names(2, 3, *routed)) is None
    # A router without its experts: the graph takes the routed path, the dense tensors do not help.
    assert mtp_head_problem(arch, values, _names(2, 3, "ffn_gate_inp.weight", *dense)) is not None
    assert mtp_head_problem(arch, values, _names(2, 3, "ffn_up.weight")) == CANNOT_RUN + "blk.2.ffn_gate.weight is missing"


def test_head_sizes_follow_llama_cpps_defaults():
    names = _names(1, 2)
    sized = _keys("qwen35", 2, 1, embedding_length=64, attention__head_count=4)
    assert mtp_head_problem("qwen35", sized, names) is None  # both 16 by default
    assert mtp_head_problem("qwen35", {**sized, "qwen35.attention.key_length": 32}, names) == CANNOT_RUN + (
        "llama.cpp's qwen35 MTP graph needs equal key and value head sizes (the file has 32 and 16)")
    rope = _keys("cohere2moe", 2, 1, embedding_length=64, attention__head_count=[4, 4], rope__dimension_count=8)
    assert "RoPE over the whole head (8 of 16 dimensions)" in mtp_head_problem(
        "cohere2moe", rope, _names(1, 2, "ffn_gate_inp.weight"))


def test_every_architecture_in_the_table_is_judged_and_its_keys_are_decoded():
    for arch, graph in MTP_ARCHITECTURES.items():
        if graph.single_block:
            assert mtp_head_problem(arch, _keys(arch, 3, 2), _names(1, 3)) == \
                CANNOT_RUN + f"this llama.cpp runs one MTP block of {arch}, the file has 2"
        for key in _keys(arch, 3, 2, leading_dense_block_count=0, attention__q_lora_rank=1):
            assert is_head_key(key)
    assert trained_heads("glm5-next", _keys("glm5-next", 3, 1), []) == (MTP,)
    assert mtp_head_problem("glm5-next", _keys("glm5-next", 3, 1), _names(2, 3)) == \
        CANNOT_RUN + "llama.cpp has no MTP graph for 'glm5-next'"


# -- what llama.cpp does with such a file ---------------------------------------------


def test_llama_cpp_aborts_on_the_head_tandem_refuses(demo_models, tmp_path):
    """Without eh_proj in its first MTP block a glm4moe file loads "trunk only" (every MTP
    tensor optional), and the MTP context's graph ends the process: why the header decides."""
    path = _write(tmp_path, "glm4moe", demo_models.draft, drop=["blk.4.nextn.eh_proj.weight"])
    assert read_metadata(path).mtp_problem == CANNOT_RUN + "blk.4.nextn.eh_proj.weight is missing"
    script = ("import sys; from app.backends.llama.backend import LlamaBackend; "
              "LlamaBackend(sys.argv[1], n_ctx=256, load_mtp=True).mtp_head(); print('no', 'abort')")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                            timeout=300, env=env, cwd=ROOT)
    assert result.returncode != 0 and "no abort" not in result.stdout
    assert "MTP block missing nextn.eh_proj" in result.stdout + result.stderr, result.stderr[-2000:]


# --- head files that lie: each of these killed the process once the head first ran -------

def _generate(target, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "generate", "--target", str(target), *extra,
                           "--prompt", "Once upon a time", "--max-tokens", "8", "--temperature", "0", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def _plain_text(target) -> str:
    return json.loads(_generate(target, "--no-speculation").stdout.splitlines()[-1])["text"]


@pytest.mark.parametrize("arch", ["qwen35", "glm4moe"])
@pytest.mark.parametrize("tensor, dtype, shown", [
    ("nextn.eh_proj.weight", np.int32, "I32"),
    ("nextn.eh_proj.weight", np.float64, "F64"),
    ("attn_output.weight", np.int16, "I16"),
])
def test_an_mtp_head_weight_of_an_integer_or_f64_type_is_one_line_and_the_target_decodes(
        demo_models, tmp_path, arch, tensor, dtype, shown):
    from app.engine.gguf.model_file import open_model_file

    ok = write_mtp_model(tmp_path / "ok.gguf", arch, vocab_from=demo_models.draft)
    block = open_model_file(ok).metadata.n_layer  # the MTP block follows the trunk
    name = f"blk.{block}.{tensor}"
    bad = write_mtp_model(tmp_path / "bad.gguf", arch, vocab_from=demo_models.draft, retype={name: dtype})
    problem = open_model_file(bad).metadata.mtp_problem
    assert problem == f"{CANNOT_RUN}{name} is stored as {shown}; llama.cpp computes with float or quantised weights"
    result = _generate(bad)  # with no draft named, the head would draft
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout.splitlines()[-1])
    assert reply["stats"]["note"] == problem and not reply["stats"]["speculative"]
    assert reply["text"] == _plain_text(bad)


def _eagle_files(demo_models, folder):
    from eagle_models import write_eagle3_drafter

    from app.engine.gguf.meta import read_metadata

    target = write_mtp_model(folder / "target.gguf", "qwen35", vocab_from=demo_models.draft)
    return target, read_metadata(target).n_vocab, write_eagle3_drafter


@pytest.mark.parametrize("case, why", [
    ("fc-int32", "fc.weight is stored as I32; llama.cpp computes with float or quantised weights"),
    ("fc-f64", "fc.weight is stored as F64; llama.cpp computes with float or quantised weights"),
    ("attn-int16", "blk.0.attn_output.weight is stored as I16; llama.cpp computes with float or quantised weights"),
    ("d2t-int32", "its d2t map is stored as I32; llama.cpp takes I64"),
    ("d2t-short", "its d2t map has {short} entries, and its output has {n} rows"),
    ("d2t-range", "its d2t map names token {past}, outside the vocabulary of {n}"),
])
def test_an_eagle3_drafter_that_lies_is_one_line_and_the_target_decodes(demo_models, tmp_path, case, why):
    target, n, write = _eagle_files(demo_models, tmp_path)
    ids = np.arange(n, dtype=np.int64)
    options = {"fc-int32": dict(retype={"fc.weight": np.int32}), "fc-f64": dict(retype={"fc.weight": np.float64}),
               "attn-int16": dict(retype={"blk.0.attn_output.weight": np.int16}),
               "d2t-int32": dict(d2t=ids.astype(np.int32)), "d2t-short": dict(d2t=ids[:-32]),
               "d2t-range": dict(d2t=np.concatenate([ids[:-1], [n + 5000]]))}[case]
    drafter = write(target, tmp_path / "drafter.gguf", **options)
    why = why.format(short=n - 32, n=n, past=n + 5000)
    check = subprocess.run([sys.executable, "-m", "app", "check-pair", str(target), str(drafter), "--json"],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
    said = json.loads(check.stdout)
    assert check.returncode == 1 and not said["compatible"] and said["rule"] == "eagle3"
    assert said["reason"] == f"Draft is an EAGLE-3 drafter that cannot draft for this target: {why}."
    result = _generate(target, "--draft", str(drafter))
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout.splitlines()[-1])
    assert why in reply["stats"]["note"] and reply["text"] == _plain_text(target)


def test_an_eagle3_drafter_with_a_right_map_still_drafts(demo_models, tmp_path):
    target, n, write = _eagle_files(demo_models, tmp_path)
    drafter = write(target, tmp_path / "drafter.gguf", d2t=np.arange(n, dtype=np.int64))
    reply = json.loads(_generate(target, "--draft", str(drafter)).stdout.splitlines()[-1])
    assert reply["stats"]["drafted"] > 0 and reply["text"] == _plain_text(target)
