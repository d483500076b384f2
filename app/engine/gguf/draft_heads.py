"""Heads trained to draft, recognised in a GGUF file: MTP ("nextn") layers, an EAGLE-3
head, Medusa heads.

Tandem does not draft with them yet (it drafts with a second model, a draft made from
the target, or copies), so a file carrying them is said to carry them, in one line,
wherever the file is judged: ``tandem check-pair`` and the model library. Only names
are looked at (metadata keys and tensor names from the validated header): nothing here
reads weights.

- MTP / nextn (DeepSeek-V3, GLM-4.5, Qwen3-Next): ``{arch}.nextn_predict_layers`` > 0,
  or tensors named ``blk.N.nextn.*``.
- EAGLE-3: an ``eagle3`` architecture (or ``eagle3.*`` keys), or the draft-to-target
  vocabulary maps ``d2t`` / ``t2d`` that EAGLE-3 conversions carry.
- Medusa: tensors or keys named ``medusa*``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MTP = "MTP (nextn) layers"
EAGLE3 = "an EAGLE-3 head"
MEDUSA = "Medusa heads"


def is_head_key(key: str) -> bool:
    """Metadata keys worth decoding for :func:`trained_heads`."""
    lowered = key.lower()
    return key.endswith(".nextn_predict_layers") or "eagle" in lowered or "medusa" in lowered


def trained_heads(architecture: str, values: Mapping[str, Any], tensor_names: Iterable[str]) -> tuple[str, ...]:
    """Which trained drafting heads a file carries, as words (empty: none)."""
    names = [name.lower() for name in tensor_names]
    keys = [key.lower() for key in values]
    found: list[str] = []
    nextn = values.get(f"{architecture}.nextn_predict_layers") if architecture else None
    if (type(nextn) is int and nextn > 0) or any(".nextn." in name for name in names):
        found.append(MTP)
    if ("eagle" in architecture.lower() or any(key.startswith(("eagle3.", "eagle.")) for key in keys)
            or any(name in ("d2t", "t2d") or name.startswith(("d2t.", "t2d.", "eagle")) for name in names)):
        found.append(EAGLE3)
    if "medusa" in architecture.lower() or any("medusa" in name for name in names) \
            or any("medusa" in key for key in keys):
        found.append(MEDUSA)
    return tuple(found)


def not_used_line(heads: Iterable[str]) -> str:
    """One line: what the file carries and that Tandem does not use it yet."""
    heads = list(heads)
    if not heads:
        return ""
    what = heads[0] if len(heads) == 1 else ", ".join(heads[:-1]) + " and " + heads[-1]
    return (f"not used yet: it carries {what}, trained to draft; Tandem drafts with a separate "
            "draft model or copies for now")
