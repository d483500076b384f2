"""What a model's memory is, and what that means for speculation (docs/recurrent-models.md).

- **attention**: a KV cache, one entry per token; a rejected draft's entries are
  simply removed, and token trees run one sequence per branch.
- **recurrent** (Mamba, Mamba2, RWKV): one state per sequence, the sum of every token;
  nothing can be taken out of it, so a rollback restores a saved state (a checkpoint)
  and decodes the kept tokens again. No token trees: they need a state per branch.
- **hybrid** (Qwen 3.5/3.6, LFM2, Granite 4.0-H, Nemotron-H, Falcon-H1, Jamba ...):
  attention layers and recurrent ones; rolled back as a recurrent model is.

llama.cpp keeps a few per-token snapshots of the recurrent state (``n_rs_seq``) on
the architectures in ``RS_ROLLBACK``: a verification rolls back over at most that
many tokens without a checkpoint. The loaded model's own answer comes from
``llama_model_is_recurrent`` / ``_is_hybrid``; these tables (llama.cpp's
``llm_arch_is_recurrent``, ``llm_arch_is_hybrid``, ``llm_arch_supports_rs_rollback``
of the vendored build) let a file be described before it loads (``check-pair``, the
library).
"""

from __future__ import annotations

ATTENTION, RECURRENT, HYBRID = "attention", "recurrent", "hybrid"

# Recurrent-state snapshots a target asks llama.cpp for (``n_rs_seq``; the backend's
# TANDEM_RS_SNAPSHOTS overrides it): a verification of up to this many drafts rolls back
# through them, on the architectures in RS_ROLLBACK.
RS_SNAPSHOTS_DEFAULT = 16

RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID_ARCHS = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
    "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
    "deepseek4", "minimax-01",
})
RS_ROLLBACK = frozenset({"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                         "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3"})


def memory_kind(architecture: str) -> str:
    if architecture in RECURRENT_ARCHS:
        return RECURRENT
    if architecture in HYBRID_ARCHS:
        return HYBRID
    return ATTENTION


def memory_note(kind: str, snapshots: int, *, draft: bool = False) -> str:
    """One line on what ``kind`` of memory means for speculation ("" for attention);
    ``snapshots``: the recurrent-state snapshots llama.cpp keeps for a rollback (0: none);
    ``draft``: said of a draft model rather than a target."""
    if kind == ATTENTION:
        return ""
    what = "hybrid model (attention + recurrent state)" if kind == HYBRID else "recurrent model (recurrent state)"
    if draft:
        return (f"{what}: each draft round saves its state, and a rejected draft restores it and "
                "decodes the kept tokens again (about one more draft batch per rejection)")
    if snapshots:
        how = (f"a verification rolls back through llama.cpp's {snapshots} state snapshots; "
               "further back, by checkpoints (a saved state restored, the kept tokens decoded again)")
    else:
        how = ("speculation rolls back by checkpoints (a saved state restored, the kept tokens "
               "decoded again), which costs about one more target batch per rejected draft")
    return f"{what}: {how}; token trees off (they need a state per branch), drafts are chains"


def file_memory_note(architecture: str, *, as_target: bool, snapshots: int = RS_SNAPSHOTS_DEFAULT) -> str:
    """``memory_note`` for a file not loaded yet, from its architecture: as a target it
    gets the snapshots its architecture has; a draft's single-token steps use none."""
    kind = memory_kind(architecture)
    return memory_note(kind, snapshots if as_target and architecture in RS_ROLLBACK else 0, draft=not as_target)
