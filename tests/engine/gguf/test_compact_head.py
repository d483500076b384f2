"""What a compact MTP head keeps and how it is written (``app.engine.gguf.compact_head``):
only where the head's output matrix is float; the trunk's blocks left out; the big
matrices as Q8_0, norms as they were; BF16 read as the float32 it stands for; nothing
left under the file's name when writing fails."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from app.engine.gguf.compact_head import CompactHeadError, _q8_of, compact_plan, write_compact_head
from app.engine.gguf.header import TensorInfo

F32, F16, Q8 = 0, 1, 8


def _tensor(name, shape, kind=F32):
    return TensorInfo(name, shape, kind, 4 * int(np.prod(shape)))


def _model(head_type=F16, arch="qwen35", layers=3, nextn=1):
    values = {f"{arch}.block_count": layers, f"{arch}.nextn_predict_layers": nextn}
    tensors = [_tensor("token_embd.weight", (64, 100), head_type), _tensor("output_norm.weight", (64,)),
               _tensor("output.weight", (64, 100), head_type)]
    for b in range(layers):
        tensors += [_tensor(f"blk.{b}.attn_norm.weight", (64,)), _tensor(f"blk.{b}.ffn_up.weight", (64, 128), F16)]
    tensors.append(_tensor(f"blk.{layers - 1}.nextn.eh_proj.weight", (128, 64), F16))
    return arch, values, tuple(tensors)


def test_a_float_output_matrix_gets_a_compact_head_of_the_last_blocks():
    plan, why = compact_plan(*_model())
    assert why == "" and plan.blocks == (2,) and plan.head_type == "F16"
    kept = dict(plan.tensors)
    assert "blk.0.attn_norm.weight" not in kept and "blk.1.ffn_up.weight" not in kept
    assert kept["output.weight"] and kept["token_embd.weight"] and kept["blk.2.nextn.eh_proj.weight"]
    assert not kept["blk.2.attn_norm.weight"] and not kept["output_norm.weight"]  # norms keep their type
    assert plan.bytes < sum(t.nbytes for t in _model()[2])


@pytest.mark.parametrize("model, reason", [
    (_model(head_type=Q8), "quantised already"),
    (_model(arch="llama"), "no MTP graph"),
    (_model(nextn=0), "no MTP blocks"),
    (_model(layers=1), "no MTP blocks"),
    (_model(layers=3)[:2] + (_model(layers=3)[2][:-1],), "not in this file"),  # a split file's first part
])
def test_no_compact_head_where_it_would_not_pay_or_run(model, reason):
    plan, why = compact_plan(*model)
    assert plan is None and reason in why


def _bf16_file(path, values: np.ndarray):
    writer = gguf.GGUFWriter(str(path), "qwen35")
    bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    writer.add_tensor("output.weight", bits.view(np.uint8), raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_bfloat16_is_quantised_as_the_floats_it_holds(tmp_path):
    rng = np.random.default_rng(0)
    values = rng.standard_normal((5000, 64)).astype(np.float32)  # more rows than a chunk
    exact = ((values.view(np.uint32) >> 16) << 16).view(np.float32)  # what bfloat16 keeps
    _bf16_file(tmp_path / "m.gguf", values)
    [tensor] = gguf.GGUFReader(str(tmp_path / "m.gguf")).tensors
    assert np.array_equal(_q8_of(tensor), gguf.quants.quantize(exact, gguf.GGMLQuantizationType.Q8_0).reshape(-1))


def test_a_failed_write_leaves_nothing_under_the_name(tmp_path):
    plan, _ = compact_plan(*_model())
    (tmp_path / "not-a-model.gguf").write_bytes(b"nothing like a GGUF")
    with pytest.raises(CompactHeadError, match="could not write"):
        write_compact_head(tmp_path / "not-a-model.gguf", tmp_path / "head.gguf", plan)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-model.gguf"]
