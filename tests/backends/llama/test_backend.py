"""The llama.cpp backend on the real demo models: logits where asked, rollback, failures."""

from __future__ import annotations

import numpy as np
import pytest

import llama_cpp as ll

from app.backends.llama.backend import LlamaBackend, _flash_attn_type
from app.backends.llama.process_setup import system_info
from app.engine.errors import ContextOverflowError, ModelFileError

from gguf_factory import write_vocab_gguf  # (tests/gguf_factory.py)


def test_logits_only_at_requested_positions(q41_target):
    q41_target.trim(0)
    tokens = q41_target.tokenize("The quick brown fox jumps", add_special=False, parse_special=False)
    rows = q41_target.evaluate(tokens, [1, len(tokens) - 1])
    assert rows.shape == (2, q41_target.n_vocab) and rows.dtype == np.float32
    assert q41_target.tokens == tokens
    assert q41_target.evaluate([42], []).shape == (0, q41_target.n_vocab)


def test_borrowed_logits_are_the_copied_ones_until_the_next_decode(q41_target):
    """``borrow=True`` lends llama.cpp's own buffer: the same rows a copy gives, valid
    until the next decode overwrites them (what every borrower must respect)."""
    assert q41_target.lends_logits
    tokens = q41_target.tokenize("The quick brown fox jumps", add_special=False, parse_special=False)
    q41_target.trim(0)
    copied = q41_target.evaluate(tokens, [2, len(tokens) - 1])
    q41_target.trim(0)
    lent = q41_target.evaluate(tokens, [2, len(tokens) - 1], borrow=True)
    assert lent.shape == copied.shape and not lent.flags.owndata
    np.testing.assert_array_equal(lent, copied)
    kept = lent.copy()
    q41_target.evaluate([42], [0], borrow=True)  # the next decode writes the same buffer
    assert not np.array_equal(lent[0], kept[0])
    q41_target.trim(0)
    assert q41_target.evaluate(tokens, [], borrow=True).shape == (0, q41_target.n_vocab)


def test_batched_equals_single_token_for_quantized_weights_and_trim_rolls_back(q41_target):
    """The strict losslessness tests rely on this: Q4_1 on CPU with flash attention on
    (as the fixture loads it) is batch-invariant."""
    prompt = q41_target.tokenize("Once upon a time, in a land far away,", add_special=False, parse_special=False)
    q41_target.trim(0)
    batched = q41_target.evaluate(prompt, range(len(prompt)))
    q41_target.trim(0)
    single = np.stack([q41_target.evaluate([t], [0])[0] for t in prompt])
    assert np.array_equal(batched, single)
    # Roll back three tokens and evaluate them again: same logits, same cache length.
    q41_target.trim(len(prompt) - 3)
    again = q41_target.evaluate(prompt[-3:], [0, 1, 2])
    assert np.array_equal(again, batched[-3:])
    assert len(q41_target.tokens) == len(prompt)


def test_flash_attention_choice():
    assert _flash_attn_type("on", 0, exact=False) == ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert _flash_attn_type("off", 99, exact=True) == ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    # On the CPU: off, where it only costs speed; on, where batches must match single tokens.
    assert _flash_attn_type("auto", 0, exact=False) == ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    assert _flash_attn_type("auto", 0, exact=True) == ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
    # A sliding window bounds what most layers attend to: on, it wins every phase.
    assert _flash_attn_type("auto", 0, exact=False, windowed=True) == ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
    from app.backends.llama import rpc

    # llama_supports_gpu_offload says yes for any build with RPC in it, GPU or not: the
    # choice goes by a GPU of this machine's own.
    if not rpc.has_local_gpu():  # a CPU-only build (RPC or not): offloading asks for nothing
        assert _flash_attn_type("auto", 99, exact=False) == ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    else:
        assert _flash_attn_type("auto", 99, exact=False) == ll.LLAMA_FLASH_ATTN_TYPE_AUTO
    with pytest.raises(ValueError, match="flash attention"):
        _flash_attn_type("fast", 0, exact=True)


def test_unquantised_target_without_flash_attention_batches_agree_to_rounding(f32_target):
    """The demo target (F32) runs without flash attention on a CPU: its batched logits
    are within rounding of single-token ones (0.01 measured; 0.03 with it)."""
    prompt = f32_target.tokenize("Once upon a time, in a land far away,", add_special=False, parse_special=False)
    f32_target.trim(0)
    batched = f32_target.evaluate(prompt, range(len(prompt)))
    f32_target.trim(0)
    single = np.stack([f32_target.evaluate([t], [0])[0] for t in prompt])
    assert np.abs(batched - single).max() < 0.03


def test_tokenize_and_token_bytes_round_trip(q41_target):
    text = "Grüße, 世界! 🙂"
    ids = q41_target.tokenize(text, add_special=False, parse_special=False)
    assert b"".join(q41_target.token_bytes(t) for t in ids).decode("utf-8") == text
    assert q41_target.token_text(q41_target.eos_id) == "<|im_end|>"
    assert q41_target.eos_id in q41_target.eog_ids


def test_context_overflow_is_refused_before_llama_cpp_sees_it(demo_models):
    model = LlamaBackend(demo_models.draft, n_ctx=256)
    try:
        with pytest.raises(ContextOverflowError, match="context"):
            model.evaluate([100] * (model.n_ctx + 1), [])
        assert model.tokens == []
    finally:
        model.close()


def test_valid_header_without_weights_fails_with_a_reason(tmp_path):
    path = write_vocab_gguf(tmp_path / "vocab-only.gguf")
    with pytest.raises(ModelFileError) as info:
        LlamaBackend(path, n_ctx=256)
    message = str(info.value)
    assert message.startswith("vocab-only.gguf: llama.cpp could not load the model (")
    assert "no reason given" not in message and "\n" not in message


def test_system_info_names_the_backend():
    info = system_info()
    assert info["backend"] in {"CPU", "CUDA", "Metal", "GPU"}
    assert info["llama_cpp_python"] >= "0.3.36"
