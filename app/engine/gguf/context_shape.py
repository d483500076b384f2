"""The context Tandem creates for a model: decided here once, for the backend that
creates it and for the memory plan that sizes it before it exists."""

from __future__ import annotations

import os

from app.engine.gguf.memory_estimate import ContextShape
from app.engine.gguf.memory_kinds import ATTENTION, RS_ROLLBACK, RS_SNAPSHOTS_DEFAULT

# Tokens llama.cpp takes in one batch (and one ubatch): a prompt is read this many at a time.
BATCH = 512
# Sequences a context holds: one per leaf of a token tree. A unified KV cache keeps the
# cells of every sequence in one buffer, so the shared prefix is stored once (a
# sequence copy only tags cells) and a single sequence runs exactly as with one.
# TANDEM_TREE_BRANCHES=1 makes single-sequence contexts (no trees then), to measure the
# two against each other.
TREE_BRANCHES = max(1, int(os.environ.get("TANDEM_TREE_BRANCHES", "8") or 8))
# Recurrent-state snapshots llama.cpp keeps per sequence (``n_rs_seq``) where the
# architecture has them (lfm2, qwen35, nemotron_h ...; clamped to 0 elsewhere): a
# verification of up to this many drafts then rolls back with no checkpoint. Each is
# one more copy of the recurrent state in memory. A draft model gets none (its steps
# are single tokens, which leave no snapshots to roll back through).
RS_SNAPSHOTS = max(0, int(os.environ.get("TANDEM_RS_SNAPSHOTS", str(RS_SNAPSHOTS_DEFAULT)) or 0))
# general.file_type of unquantised models: F32, F16, BF16 (llama_ftype 0, 1, 32).
FLOAT_FILE_TYPES = frozenset({0, 1, 32})
FLASH_ATTENTION = ("auto", "on", "off")
# Tokens a prompt's reading needs before it goes to a flash-attention context of its own
# (``reads_apart``): below this the second context's making and the move cost more than
# the kernel saves. A long prompt read in pieces (``PAUSE_EVERY``, 512) starts apart too.
READ_APART_MIN = 512


def flash_attention(choice: str, *, gpu: bool, exact: bool, windowed: bool = False) -> bool | None:
    """Whether a context runs flash attention: True, False, or None for llama.cpp's own
    choice. ``gpu``: its layers are on a GPU of this machine; ``exact``: batched logits
    must equal single-token ones; ``windowed``: the model attends through a sliding
    window (Gemma 2/3, gpt-oss, Cohere 2 ...).

    On a GPU, auto is llama.cpp's choice. On a CPU (and on RPC workers, whose device kind
    ggml's RPC does not report), llama.cpp's flash-attention kernel makes batched
    verification slower as the context grows (9 tokens after 3,000: 76 ms without it, 386
    ms with it; one step 37 against 62 ms; demo target, 2 threads of a Xeon, AVX-512) while
    it reads a prompt faster (3,000 tokens: 7.8 s against 9.8; docs/performance.md). A context has one setting for both, so auto
    turns it off for decoding, and a long prompt is read by a second context with it on
    (``reads_apart``), except where ``exact``
    asks for batched logits identical to single-token ones: without flash attention, a
    quantised model's batched logits come out up to ~1 apart from its single-token ones
    (activations are rounded to 8 bits, so the attention's different summation order
    grows), enough to flip near-ties between verification and plain decoding; with it
    they match bit for bit. (Unquantised weights are the other way round: without flash
    attention they are the closer, 0.01 apart against 0.03, so ``exact`` is not asked
    for them.)

    A windowed model is the other way round on a CPU: most of its layers attend to at
    most the window, so the kernel's cost stops growing with the context, and it wins
    every phase (Gemma 3 270M F16, 3,500 tokens: reading 7.1 s against 9.0, verifying 9
    tokens 77 ms against 82, one step 23 ms against 27), so auto turns it on."""
    if choice == "on":
        return True
    if choice == "off":
        return False
    if choice != "auto":
        raise ValueError(f"flash attention must be 'auto', 'on' or 'off', not {choice!r}")
    if gpu:
        return None
    return exact or windowed


def reads_apart(choice: str, *, gpu: bool, exact: bool, windowed: bool = False) -> bool:
    """Whether a long prompt (``READ_APART_MIN`` tokens or more) is read with flash attention
    by a second context and moved into the decoding one, which runs without it
    (``app/backends/llama/flash_reader.py``): where auto turned it off, on a CPU. The move
    costs in what the cache holds already (its values are laid out again, both ways), so
    a reading no longer than that goes where it is."""
    return choice == "auto" and flash_attention(choice, gpu=gpu, exact=exact, windowed=windowed) is False


def worth_reading_apart(tokens: int, held: int) -> bool:
    """Whether reading ``tokens`` after the ``held`` a cache holds already goes to the
    flash-attention reader: making it costs a fixed time, and moving the cache in and back
    a time per token held and read; the kernel saves a time per token read."""
    return tokens >= max(READ_APART_MIN, held)


def context_shape(memory_kind: str, architecture: str, file_type: int | None, n_ctx: int, *,
                  draft: bool, flash: str = "auto", gpu: bool = False,
                  rs_snapshots: int | None = None, windowed: bool = False) -> ContextShape:
    """The context for a model of ``memory_kind`` and ``architecture`` as a target (or a
    ``draft``): its batch, its sequences, its snapshots and its flash attention.
    ``rs_snapshots``: snapshots to ask for (None: ``RS_SNAPSHOTS`` for a target, none
    for a draft, whose single-token steps leave none to use)."""
    batch = min(n_ctx, BATCH)
    # A recurrent state per sequence: a tree would need one per branch, and each
    # sequence costs a whole state. One sequence, no trees.
    attention = memory_kind == ATTENTION
    snapshots = (0 if draft else RS_SNAPSHOTS) if rs_snapshots is None else max(0, rs_snapshots)
    # llama.cpp clamps the snapshots to 0 on an architecture that has none.
    n_rs_seq = snapshots if not attention and architecture in RS_ROLLBACK else 0
    exact = not draft and file_type not in FLOAT_FILE_TYPES
    fa = flash_attention(flash, gpu=gpu, exact=exact, windowed=windowed)
    return ContextShape(n_ctx=n_ctx, n_batch=batch, n_ubatch=batch, n_seq_max=TREE_BRANCHES if attention else 1,
                        n_rs_seq=n_rs_seq, flash_attn=True if fa is None else fa)
