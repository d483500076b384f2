"""Planning a draft made from the target (engine/speculation/self_draft.py) and recognising heads
trained to draft (engine/gguf/draft_heads.py), on small real GGUF files written here."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from app.engine.gguf.draft_heads import CANNOT_RUN, EAGLE3, MEDUSA, MTP, head_lines
from app.engine.gguf.meta import read_metadata
from app.engine.speculation.self_draft import DEFAULT_VARIANT, SelfDraftError, plan_draft

from gguf_factory import make_tokens


def write_model(path: Path, *, arch: str = "llama", layers: int = 4, width: int = 256,
                extra_tensors: tuple[str, ...] = (), extra_keys: dict | None = None) -> Path:
    """A tiny model file: a vocabulary, ``layers`` blocks of one F32 matrix each, an output norm."""
    w = gguf.GGUFWriter(path, arch)
    w.add_name("tiny")
    w.add_block_count(layers)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(make_tokens(64))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for key, value in (extra_keys or {}).items():
        if isinstance(value, list):
            w.add_array(key, value)
        else:
            w.add_uint32(key, value)
    w.add_tensor("token_embd.weight", np.zeros((64, width), dtype=np.float32))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((width, width), dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros(width, dtype=np.float32))
    for name in extra_tensors:
        w.add_tensor(name, np.zeros(8, dtype=np.float32))
    w.add_tensor("output_norm.weight", np.zeros(width, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_quantised_plan_keeps_every_layer_and_needs_less_than_the_f32_file(tmp_path):
    path = write_model(tmp_path / "t.gguf")
    plan = plan_draft(path)
    assert plan.variant == DEFAULT_VARIANT == "Q4_K_M" and plan.n_layer == plan.keep_layers == 4 and plan.prune == ()
    assert plan.tensors_out == 1 + 4 * 2 + 1
    # 4.85 bits for the 256-wide matrices against 32: about a sixth, plus room for metadata.
    matrices = 4 * 256 * 256 * 4
    assert plan.bytes_needed < path.stat().st_size + (8 << 20)
    assert plan.bytes_needed - (8 << 20) < matrices // 4
    assert "Q4_K_M" in plan.file_name() and plan.file_name().endswith(".draft.gguf")


def test_the_default_variant_follows_the_target_s_own_type():
    from app.engine.speculation.self_draft import default_variant

    assert [default_variant(t) for t in (None, 0, 1, 32, 7)] == ["Q4_K_M"] * 5  # F32, F16, BF16, Q8_0
    assert [default_variant(t) for t in (2, 3, 15, 10)] == ["Q2_K"] * 4  # already 4 bits or fewer


def test_two_targets_named_alike_get_different_draft_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = plan_draft(write_model(tmp_path / "a" / "m.gguf"))
    two = plan_draft(write_model(tmp_path / "b" / "m.gguf"))
    assert one.file_name() != two.file_name()


def test_early_exit_drops_the_last_layers_and_keeps_the_head(tmp_path):
    plan = plan_draft(write_model(tmp_path / "t.gguf", layers=6), "Q8_0", layers=2)
    assert plan.keep_layers == 2 and plan.prune == (2, 3, 4, 5)
    assert plan.tensors_out == 1 + 2 * 2 + 1  # the embeddings and the output norm stay
    assert "first 2 of 6 layers" in plan.describe() and ".L2of6." in plan.file_name()


@pytest.mark.parametrize("arch, keys, needle", [
    ("gemma3", {}, "cannot be cut from a gemma3 model"),
    ("jamba", {}, "cannot be cut from a jamba model"),
    ("llama", {"llama.nextn_predict_layers": 1}, "MTP heads"),
    ("qwen2moe", {"qwen2moe.leading_dense_block_count": 1}, "dense"),
    ("llama", {"llama.attention.head_count_kv": [2, 2, 4, 4]}, "set per layer"),
])
def test_pruning_is_refused_where_layers_differ(tmp_path, arch, keys, needle):
    path = write_model(tmp_path / "t.gguf", arch=arch, extra_keys=keys)
    with pytest.raises(SelfDraftError) as caught:
        plan_draft(path, layers=2)
    message = str(caught.value)
    assert needle in message and "\n" not in message
    plan_draft(path)  # quantising alone is fine for every architecture


@pytest.mark.parametrize("layers", [0, 4, 9])
def test_a_layer_count_outside_the_model_is_refused(tmp_path, layers):
    with pytest.raises(SelfDraftError, match="from 1 to 3"):
        plan_draft(write_model(tmp_path / "t.gguf"), layers=layers)


@pytest.mark.parametrize("variant", ["IQ2_XS", "iq1_s", "IQ2_XXS", "Q2_K_S", "IQ3_XXS"])
def test_types_that_need_an_importance_matrix_say_so(tmp_path, variant):
    with pytest.raises(SelfDraftError, match="needs an importance matrix"):
        plan_draft(write_model(tmp_path / "t.gguf"), variant)


def test_an_unknown_variant_and_keep_without_layers(tmp_path):
    path = write_model(tmp_path / "t.gguf")
    with pytest.raises(SelfDraftError, match="Q4_0"):
        plan_draft(path, "Q5_9")
    with pytest.raises(SelfDraftError, match="needs --layers"):
        plan_draft(path, "keep")
    plan = plan_draft(path, "keep", layers=1)
    assert plan.bytes_needed > 0 and "its own types" in plan.describe()


def test_a_file_without_a_layer_count_is_refused(tmp_path):
    from gguf_factory import write_vocab_gguf

    with pytest.raises(SelfDraftError, match="no layer count"):
        plan_draft(write_vocab_gguf(tmp_path / "v.gguf", tensor=True))


# -- heads trained to draft ---------------------------------------------------------


@pytest.mark.parametrize("arch, tensors, keys, expected", [
    ("llama", (), {}, ()),
    ("glm4moe", (), {"glm4moe.nextn_predict_layers": 1}, (MTP,)),
    ("llama", ("blk.3.nextn.eh_proj.weight",), {}, (MTP,)),
    ("eagle3", ("d2t",), {}, (EAGLE3,)),
    ("llama", ("d2t", "t2d"), {}, (EAGLE3,)),
    ("llama", ("medusa_head.0.weight",), {}, (MEDUSA,)),
    ("llama", ("medusa.1.weight", "blk.0.nextn.shared_head_norm.weight"), {}, (MTP, MEDUSA)),
])
def test_heads_trained_to_draft_are_recognised(tmp_path, arch, tensors, keys, expected):
    meta = read_metadata(write_model(tmp_path / "h.gguf", arch=arch, extra_tensors=tensors, extra_keys=keys))
    assert meta.draft_heads == expected
    lines = head_lines(meta.architecture, meta.draft_heads, meta.mtp_layers, meta.mtp_problem)
    # None of these MTP heads can run (no graph for llama; glm4moe's file lacks the tensors);
    # an EAGLE-3 head inside a llama file and Medusa share one line; an EAGLE-3 drafter
    # file says it drafts when named (test_draft_heads.py).
    unused = ["an EAGLE-3 drafter: "] if arch == "eagle3" else ["not used yet: "] * bool(set(expected) - {MTP})
    assert [line.partition(": ")[0] + ": " for line in lines] == [CANNOT_RUN] * (MTP in expected) + unused
    assert all("\n" not in line for line in lines)
