"""``trim`` is exact on every memory kind (docs/recurrent-models.md).

After any mix of batches, draft-like single-token steps and trims (within the last
batch, further back, to the start), the next token's logits are bit-identical to a
fresh context's that decoded the same tokens. Flash attention is off here: with it,
llama.cpp's CPU kernel takes another path for batches of 64 or more (a long prefix
decoded in one go), which rounds differently from the small batches the history was
made of; without it these tiny models are batch-invariant, so any difference is the
rollback's. (The attention model keeps it, and is compared in batches under 64.)
"""

from __future__ import annotations

import numpy as np
import pytest

from app.backends.llama.backend import LlamaBackend

# (arch, memory, how a rollback within a verification goes)
KINDS = [("mamba", "recurrent", "restored"), ("lfm2", "hybrid", "native"), ("granitehybrid", "hybrid", "restored")]


def _fresh_logits(reference: LlamaBackend, tokens: list[int]) -> np.ndarray:
    """The last token's logits after decoding ``tokens`` from an empty context, in
    batches under 64 (the attention model keeps flash attention: see the top)."""
    reference.trim(0)
    for start in range(0, len(tokens) - 1, 32):
        reference.evaluate(tokens[start:min(start + 32, len(tokens) - 1)], [])
    return reference.evaluate(tokens[-1:], [0])[0]


def _exercise(model: LlamaBackend, reference: LlamaBackend, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.integers(100, 40000, 220)]
    model.trim(0)
    model.evaluate(tokens[:50], [])
    pos = 50
    for step in range(18):
        k = int(rng.integers(1, 8))
        batch = tokens[pos:pos + k]
        if step % 3 == 1:  # a draft model's round: a rollback point, then single-token steps
            model.rollback_point()
            for token in batch:
                model.evaluate([token], [0])
        else:              # a verification: one batch
            model.evaluate(batch, range(len(batch)))
        # Mostly within the batch; every sixth step far back (a new turn, an edit).
        keep = pos + int(rng.integers(1, len(batch) + 1)) if step % 6 else int(rng.integers(5, pos))
        model.trim(keep)
        assert model.tokens == tokens[:keep]
        pos = keep
        got = model.evaluate([tokens[pos]], [0])[0]
        pos += 1
        np.testing.assert_array_equal(got, _fresh_logits(reference, tokens[:pos]),
                                      err_msg=f"{model.architecture}, step {step}: trim to {keep} is not exact")


@pytest.mark.parametrize("arch,memory,within_batch", KINDS)
def test_trim_leaves_the_logits_of_a_fresh_decode(recurrent_pairs, arch, memory, within_batch):
    target, _ = recurrent_pairs[arch]
    model = LlamaBackend(target, n_ctx=512, n_threads=2, flash_attention="off")
    reference = LlamaBackend(target, n_ctx=512, n_threads=2, flash_attention="off")
    try:
        assert model.memory == memory
        assert model.tree_branches == 1  # one state per sequence: no trees
        assert (model.rs_snapshots > 0) == (within_batch == "native")
        assert "token trees off" in model.memory_note
        for seed in range(2):
            _exercise(model, reference, seed)
        # Each way back was taken, so the test covers them: llama.cpp's snapshots or a
        # checkpoint restored within a batch, and decoding again from an older point.
        assert model.rollbacks[within_batch] > 0, model.rollbacks
        assert model.rollbacks["redecoded"] > 0, model.rollbacks
    finally:
        model.close()
        reference.close()


def test_attention_trim_stays_native(demo_models):
    """An attention model cuts its cache by position: no checkpoint, nothing decoded again."""
    model = LlamaBackend(demo_models.draft, n_ctx=512, n_threads=2)
    reference = LlamaBackend(demo_models.draft, n_ctx=512, n_threads=2)
    try:
        assert model.memory == "attention" and model.memory_note == ""
        _exercise(model, reference, 0)
        assert model.rollbacks["redecoded"] == 0 and model.rollbacks["restored"] == 0
    finally:
        model.close()
        reference.close()


def test_snapshots_are_not_trusted_after_single_steps(recurrent_pairs):
    """llama.cpp's snapshots cover the last batch only; after single-token steps it would
    still accept a cut (reading a stale snapshot). The backend restores instead."""
    target, _ = recurrent_pairs["lfm2"]
    model = LlamaBackend(target, n_ctx=256, n_threads=2, flash_attention="off")
    reference = LlamaBackend(target, n_ctx=256, n_threads=2, flash_attention="off")
    try:
        tokens = list(range(1000, 1040))
        model.evaluate(tokens[:20], [])  # snapshots now describe this batch
        model.rollback_point()
        for token in tokens[20:24]:
            model.evaluate([token], [0])
        model.trim(22)
        got = model.evaluate(tokens[22:23], [0])[0]
        np.testing.assert_array_equal(got, _fresh_logits(reference, tokens[:23]))
        assert model.rollbacks["native"] == 0 and model.rollbacks["restored"] == 1
    finally:
        model.close()
        reference.close()
