"""A line of tokens on sequence 0 put into a ``llama_batch``: the decoding context's
batches (``LlamaBackend._decode``) and the flash-attention reader's (``flash_reader.py``)."""

from __future__ import annotations

from typing import Sequence


def fill_line(batch, tokens: Sequence[int], first_pos: int, logits: Sequence[bool]) -> None:
    """``tokens`` at positions ``first_pos`` on, each with a row of logits where ``logits`` says."""
    for i, (token, flag) in enumerate(zip(tokens, logits)):
        batch.token[i] = token
        batch.pos[i] = first_pos + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = flag
    batch.n_tokens = len(tokens)
