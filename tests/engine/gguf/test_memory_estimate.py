"""The memory estimate (app/engine/gguf/memory_estimate.py) against what llama.cpp itself
allocates when it loads the same file with the context Tandem makes: the sum of its
buffers ("model", "KV", "RS", "output", "compute buffer size"), for every family the tests
have, within 15% (in practice within 2%), and the weights within 2% (to the byte where
llama.cpp maps the file as it is and repacks nothing for this CPU)."""

from __future__ import annotations

import collections

import pytest

from app.engine.gguf.context_shape import context_shape
from app.engine.gguf.memory_estimate import ContextShape, estimate_memory
from app.engine.gguf.model_file import open_model_file

TOLERANCE = 0.15


def _estimate(path, n_ctx: int, *, draft: bool):
    model = open_model_file(path)
    shape = context_shape(model.memory_kind, model.architecture, model.file_type, n_ctx, draft=draft)
    return estimate_memory(model.header.tensors, model.hparams, model.n_vocab, shape, memory_kind=model.memory_kind)


def _allocated(path, n_ctx: int, *, draft: bool) -> dict[str, int]:
    from app.backends.llama.backend import LlamaBackend

    model = LlamaBackend(path, n_ctx=n_ctx, n_threads=1, exact_batches=not draft,
                         rs_snapshots=0 if draft else None)
    try:
        parts: collections.Counter = collections.Counter()
        for _device, part, size in model.buffers:
            parts[part] += size
        return dict(parts)
    finally:
        model.close()


def _check(path, n_ctx: int, *, draft: bool = False, exact_weights: bool = True) -> None:
    estimate = _estimate(path, n_ctx, draft=draft)
    real = _allocated(path, n_ctx, draft=draft)
    assert {"weights", "compute", "output"} <= set(real), real  # the log lines were read
    total = sum(real.values())
    assert abs(estimate.llama_bytes - total) <= TOLERANCE * total, (estimate.parts(), real)
    if exact_weights:  # the file's tensors, mapped (a few rows repacked for this CPU beside them)
        assert abs(estimate.weights - real["weights"]) <= 2**14 + 0.02 * real["weights"], (estimate.weights, real)
    for part in ("kv_cache", "recurrent_state"):
        assert abs(estimate.parts()[part] - real.get(part, 0)) <= max(2**14, 0.02 * real.get(part, 0)), (part, real)


@pytest.mark.parametrize("n_ctx", [2048, 8192])
def test_the_demo_target_and_draft(demo_models, n_ctx):
    _check(demo_models.target, n_ctx)
    _check(demo_models.draft, n_ctx, draft=True)
    _check(demo_models.draft, n_ctx)  # a quantised target runs flash attention (a smaller graph)


def test_gemma3_whose_logits_make_the_compute_buffer_as_big_as_its_weights(gemma_files):
    f16, q4 = gemma_files
    _check(f16, 8192)
    # llama.cpp repacks Q4_K rows for this CPU into a buffer of their own: the total still holds
    _check(q4, 8192, draft=True, exact_weights=False)
    estimate = _estimate(f16, 8192, draft=False)
    assert estimate.compute > 0.9 * estimate.weights  # the 262k vocabulary's logits for a ubatch


def test_every_recurrent_and_hybrid_family(recurrent_pairs):
    for arch, (target, draft) in recurrent_pairs.items():
        _check(target, 8192)
        _check(draft, 2048, draft=True, exact_weights=False)  # Q4_0: rows repacked for this CPU


def test_a_wider_hybrid_with_its_rollback_snapshots(tmp_path, demo_models):
    """Qwen 3.5's gated delta net at a width where its state (and the 16 snapshots
    llama.cpp keeps of it) is tens of megabytes, and attention without flash attention."""
    from recurrent_models import write_recurrent_model

    path = write_recurrent_model(tmp_path / "qwen35.gguf", "qwen35", vocab_from=demo_models.draft, ftype="F16",
                                 n_embd=512, n_layer=6, n_ff=1024, n_head=8, n_head_kv=2, d_state=64,
                                 ssm_heads=16, ssm_groups=8)
    estimate = _estimate(path, 8192, draft=False)
    assert estimate.shape.n_rs_seq == 16 and estimate.recurrent_state > 2**20
    _check(path, 8192)


class _Tensor:
    def __init__(self, name: str, nbytes: int) -> None:
        self.name, self.nbytes = name, nbytes


def test_mtp_layers_are_not_counted_while_they_are_not_loaded():
    """llama.cpp skips a file's NextN layers unless asked to load them (load_mtp): their
    weights and their cache are no part of the target."""
    tensors = [_Tensor("token_embd.weight", 1000), _Tensor("output.weight", 1000)]
    tensors += [_Tensor(f"blk.{i}.attn_k.weight", 100) for i in range(5)]
    hparams = {"block_count": 5, "nextn_predict_layers": 1, "embedding_length": 64,
               "attention.head_count": 4, "attention.head_count_kv": 2}
    shape = ContextShape(n_ctx=1000, n_batch=512, n_ubatch=512, n_seq_max=1, n_rs_seq=0, flash_attn=True)
    estimate = estimate_memory(tensors, hparams, 100, shape)
    assert estimate.n_layers == 4 and estimate.weights == 2400
    assert estimate.kv_cache == 4 * 1024 * 2 * 32 * 2  # 4 layers x 1,024 cells x 2 heads x (16 + 16) x 2 bytes


def test_a_split_puts_the_last_layers_and_then_the_head_on_the_gpu(demo_models):
    estimate = _estimate(demo_models.target, 4096, draft=False)
    n = estimate.n_layers
    assert estimate.gpu_bytes(0) == 0 and estimate.ram_bytes(0) == estimate.bytes
    one = estimate.gpu_bytes(1)
    assert one == estimate.layers[-1].bytes + estimate.compute_layers
    assert estimate.gpu_bytes(n) < estimate.gpu_bytes(n + 1) == estimate.gpu_bytes(-1)
    # Wholly on the GPU, system memory keeps the embeddings (and the output buffer) only
    assert estimate.ram_bytes(-1) == estimate.input_weights + estimate.output_buffer
    for g in (0, 1, n // 2, n, n + 1):
        assert estimate.gpu_bytes(g) + estimate.ram_bytes(g) >= estimate.bytes  # scratch on both sides


@pytest.mark.parametrize("hparams", [
    {}, {"block_count": -3}, {"block_count": 10**12}, {"block_count": True, "embedding_length": 64},
    {"block_count": 2, "embedding_length": -64, "attention.head_count": 0, "attention.head_count_kv": [0, "x"]},
    {"block_count": 2, "attention.head_count": [4.5, None], "feed_forward_length": ["a", -1, 2**40],
     "ssm.conv_kernel": -4, "ssm.inner_size": 2**63, "wkv.head_size": 0},
])
def test_a_hostile_header_is_estimated_without_an_error(hparams):
    """Whatever a file's sizes say, the estimate is a number (the header check and the
    trial load refuse the file where llama.cpp would); never an exception or a hang."""
    tensors = [_Tensor("token_embd.weight", 10), _Tensor("blk.0.attn_k.weight", 5), _Tensor("blk.99.ssm_a", 5)]
    shape = ContextShape(n_ctx=2**24, n_batch=512, n_ubatch=512, n_seq_max=8, n_rs_seq=16, flash_attn=False)
    for kind in ("attention", "recurrent", "hybrid"):
        estimate = estimate_memory(tensors, hparams, 50, shape, memory_kind=kind)
        assert estimate.bytes >= 0 and estimate.n_layers <= 512
        assert estimate.gpu_bytes(-1) >= 0 and estimate.ram_bytes(0) >= 0
