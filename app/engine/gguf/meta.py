"""GGUF model files: tokenizer metadata, and whether a draft suits a target.

The header is checked first (``header.py``, which says why a hostile file is
refused). :func:`read_metadata` decodes the few keys it needs during that same walk:
``GGUFReader`` builds numpy arrays for every token and merge and took 6-8 s on the
98 MB demo model, against well under 0.1 s here.

:func:`check_compatibility` mirrors llama.cpp's ``common_speculative_are_compatible``,
read from metadata before any weights load, with llama.cpp's own rules in its order: the
same vocabulary type; the same BOS and EOS ids and add-BOS/add-EOS flags; vocabulary
sizes within ``SPEC_VOCAB_MAX_SIZE_DIFFERENCE`` (128) of each other; token texts equal
from id ``SPEC_VOCAB_CHECK_START_TOKEN_ID`` (5) up to the smaller vocabulary. The first
rule that fails is named (for token texts, the first differing id and both texts).
:func:`pair_verdict` says what then happens with the pair: a draft that passes drafts
token for token; one that does not drafts through text (docs/cross-vocabulary.md,
``app/engine/speculation/text_bridge.py``), acceptance measured, not promised.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf

from app.engine.gguf.draft_heads import (eagle3_borrows, eagle3_map_problem, eagle3_problem, eagle3_reads, is_head_key, mtp_head_problem, mtp_layers,
                                        trained_heads)
from app.engine.gguf.header import GGUFHeader, file_error, scan_header, shown_name
from app.engine.gguf.rules import ADD_BOS_BPE_PRE

# Keys read_metadata wants decoded; every other value is only bounds-checked.
_WANTED_KEYS = frozenset({
    "general.architecture", "general.name", "general.file_type",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
    "tokenizer.chat_template",
})

# llama.cpp's vocab loader (llama-vocab.cpp) turns add-BOS on by default for these
# tokenizer models, and for BPE ("gpt2") vocabularies with these pre-tokenizers.
_ADD_BOS_MODELS = frozenset({"llama", "bert", "gemma4"})
_ADD_BOS_BPE_PRE = ADD_BOS_BPE_PRE
_ADD_EOS_MODELS = frozenset({"t5"})

# common/speculative.cpp
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5


@dataclass(frozen=True)
class ModelMetadata:
    """The parts of a GGUF header Tandem needs before loading weights."""

    path: Path
    architecture: str
    name: str
    vocab_type: str                     # tokenizer.ggml.model: "gpt2", "llama", ...
    tokens: tuple[str, ...] = field(repr=False)
    n_vocab: int
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    chat_template: str | None = field(repr=False)
    context_length: int | None
    file_type: int | None               # llama_ftype, e.g. 3 = MOSTLY_Q4_1
    file_size: int
    n_parameters: int = 0               # elements of this file's tensors (a split model: this part's)
    draft_heads: tuple[str, ...] = ()   # trained drafting heads it carries (draft_heads.py)
    # Its MTP head (draft_heads.py): how many layers, and why llama.cpp could not run it
    # (None: it can, when mtp_layers > 0). Judged from the header: llama.cpp aborts on a bad head.
    mtp_layers: int = 0
    mtp_problem: str | None = None
    n_layer: int = 0                    # its blocks, MTP blocks left out (llama.cpp's n_layer)
    n_embd: int = 0                     # its rows' width ({arch}.embedding_length)
    # An EAGLE-3 drafter's target layers and the target width it reads (draft_heads.eagle3_reads).
    eagle3_layers: tuple[int, ...] = ()
    eagle3_width: int = 0
    eagle3_borrows: tuple[str, ...] = ()  # what it takes from its target (draft_heads.eagle3_borrows)
    # An EAGLE-3 drafter's tensors, {name: (ggml type, shape)}, and the lowest and highest
    # id its d2t map names (read from a file on disk by open_model_file; None: not read).
    eagle3_tensors: Mapping[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict, repr=False)
    eagle3_d2t_range: tuple[int, int] | None = None

    @property
    def file_type_name(self) -> str | None:
        """``"Q4_1"`` for file_type 3; None when absent or unknown to ``gguf``."""
        if self.file_type is None:
            return None
        try:
            return gguf.LlamaFileType(self.file_type).name.removeprefix("MOSTLY_")
        except ValueError:
            return None


@dataclass(frozen=True)
class Compatibility:
    """Whether a draft can speculate for a target; ``rule`` names the first failed rule."""

    ok: bool
    rule: str | None  # "vocab_type", "special_tokens", "vocab_size", "token_text", "eagle3"
    reason: str
    # The vocabularies differ (``rule`` says where) and the draft drafts through text
    # (text_bridge.py): usable, with no promise about acceptance.
    through_text: bool = False
    # The draft is an EAGLE-3 drafter that reads the target's layers (eagle_head.py).
    reads_target: bool = False


# ---------------------------------------------------------------------------
# Metadata


def metadata_key(key: str) -> bool:
    """The keys :func:`metadata_from` reads (for the header walk to decode)."""
    return key in _WANTED_KEYS or key.endswith(".context_length") or is_head_key(key)


def read_metadata(path: str | os.PathLike[str]) -> ModelMetadata:
    """Validate a GGUF file and read its tokenizer and a few general keys. A caller that
    goes on to load the file wants ``app.engine.gguf.model_file.open_model_file(path).metadata``:
    the same walk, once, with everything else a load needs."""
    path = Path(path)
    header, values = scan_header(path, metadata_key)
    return metadata_from(path, header, values)


def metadata_from(path: Path, header: GGUFHeader, values: dict[str, Any]) -> ModelMetadata:
    """The metadata in ``values`` (decoded by a walk that wanted :func:`metadata_key`);
    a missing vocabulary or a value of the wrong type is a ModelFileError naming ``path``."""
    get = _Values(path, values)

    tokens = get.strings("tokenizer.ggml.tokens")
    if not tokens:
        raise file_error(path, "has no tokenizer vocabulary (tokenizer.ggml.tokens)")
    vocab_type = get.string("tokenizer.ggml.model")
    if vocab_type is None:
        raise file_error(path, "has no tokenizer type (tokenizer.ggml.model)")
    add_bos = get.boolean("tokenizer.ggml.add_bos_token")
    add_eos = get.boolean("tokenizer.ggml.add_eos_token")
    architecture = get.string("general.architecture") or ""
    tensor_names = [t.name for t in header.tensors]
    nextn = mtp_layers(architecture, values)
    is_eagle3 = architecture == "eagle3"  # a drafter file: what it reads of its target
    reads, reads_width = eagle3_reads(values) if is_eagle3 else ((), 0)

    return ModelMetadata(
        path=path,
        architecture=architecture,
        name=get.string("general.name") or Path(shown_name(path)).stem,
        vocab_type=vocab_type,
        tokens=tokens,
        n_vocab=len(tokens),
        bos_id=get.integer("tokenizer.ggml.bos_token_id"),
        eos_id=get.integer("tokenizer.ggml.eos_token_id"),
        add_bos=_default_add_bos(vocab_type, get.string("tokenizer.ggml.pre")) if add_bos is None else add_bos,
        add_eos=(vocab_type in _ADD_EOS_MODELS) if add_eos is None else add_eos,
        chat_template=get.string("tokenizer.chat_template"),
        context_length=get.integer(f"{architecture}.context_length") if architecture else None,
        file_type=get.integer("general.file_type"),
        file_size=header.file_size,
        n_parameters=header.n_parameters,
        draft_heads=trained_heads(architecture, values, tensor_names),
        mtp_layers=nextn,
        mtp_problem=mtp_head_problem(architecture, values, tensor_names,
                                     {t.name: t.ggml_type for t in header.tensors}),
        n_layer=max(0, (get.integer(f"{architecture}.block_count") or 0) - nextn),
        n_embd=get.integer(f"{architecture}.embedding_length") or 0,
        eagle3_layers=reads,
        eagle3_width=reads_width,
        eagle3_borrows=eagle3_borrows(tensor_names) if is_eagle3 else (),
        eagle3_tensors=({t.name: (t.ggml_type, t.shape) for t in header.tensors} if is_eagle3 else {}),
    )


def _default_add_bos(vocab_type: str, pre: str | None) -> bool:
    """llama.cpp's choice when the file has no tokenizer.ggml.add_bos_token."""
    if vocab_type == "gpt2":
        return pre in _ADD_BOS_BPE_PRE
    return vocab_type in _ADD_BOS_MODELS


class _Values:
    """Typed access to decoded metadata; a value of the wrong type is a ModelFileError
    (llama.cpp would refuse the file too, without saying which key)."""

    def __init__(self, path: Path, values: dict[str, Any]) -> None:
        self.path = path
        self.values = values

    def _get(self, key: str, ok: Callable[[Any], bool], expected: str) -> Any:
        value = self.values.get(key)
        if value is not None and not ok(value):
            raise file_error(self.path, f"metadata '{key}' is not {expected}")
        return value

    def string(self, key: str) -> str | None:
        return self._get(key, lambda v: isinstance(v, str), "a string")

    def integer(self, key: str) -> int | None:
        return self._get(key, lambda v: type(v) is int, "an integer")

    def boolean(self, key: str) -> bool | None:
        return self._get(key, lambda v: isinstance(v, bool), "a boolean")

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._get(
            key, lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v), "an array of strings"
        )
        return tuple(value or ())


# ---------------------------------------------------------------------------
# Compatibility


def check_compatibility(target: ModelMetadata, draft: ModelMetadata) -> Compatibility:
    """llama.cpp's rules for a draft model, checked in llama.cpp's order (the module's
    docstring lists them)."""

    def incompatible(rule: str, why: str) -> Compatibility:
        return Compatibility(False, rule, f"Draft is incompatible with target: {why}")

    if target.vocab_type != draft.vocab_type:
        return incompatible(
            "vocab_type",
            f"tokenizer types differ (target {target.vocab_type!r}, draft {draft.vocab_type!r})",
        )
    for attr, label in (
        ("add_bos", "add-BOS flags"), ("add_eos", "add-EOS flags"),
        ("bos_id", "BOS token ids"), ("eos_id", "EOS token ids"),
    ):
        t, d = getattr(target, attr), getattr(draft, attr)
        if t != d:
            return incompatible("special_tokens", f"{label} differ (target {t}, draft {d})")
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return incompatible(
            "vocab_size",
            f"vocabulary sizes differ by {diff} (target {target.n_vocab}, draft {draft.n_vocab}; "
            f"at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE} allowed)",
        )
    start, stop = SPEC_VOCAB_CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)
    # Tuple slices compare at C speed; look for the index only when they differ.
    if target.tokens[start:stop] != draft.tokens[start:stop]:
        i = next(i for i in range(start, stop) if target.tokens[i] != draft.tokens[i])
        return incompatible(
            "token_text",
            f"token {i} differs (target {_short_repr(target.tokens[i])}, draft {_short_repr(draft.tokens[i])})",
        )
    return Compatibility(True, None, "Draft is compatible with target.")


# tokenizer.ggml.model -> the algorithm people know it by
_TOKENIZER_NAMES = {"llama": "SentencePiece", "gpt2": "BPE", "bert": "WordPiece", "t5": "Unigram",
                    "rwkv": "RWKV", "plamo2": "PLaMo-2", "gemma4": "SentencePiece (Gemma 4)"}


def tokenizer_name(meta: ModelMetadata) -> str:
    """e.g. "BPE ('gpt2', 49,152 tokens)"."""
    return f"{_TOKENIZER_NAMES.get(meta.vocab_type, meta.vocab_type)} ({meta.vocab_type!r}, {meta.n_vocab:,} tokens)"


def pair_verdict(target: ModelMetadata, draft: ModelMetadata) -> Compatibility:
    """What happens with this pair: the same vocabulary drafts token for token
    (``check_compatibility``); another drafts through text (docs/cross-vocabulary.md),
    every file with a vocabulary can. An EAGLE-3 drafter reads its target's layers:
    the same vocabulary, and layers this target has and hands out."""
    same = check_compatibility(target, draft)
    if draft.architecture == "eagle3":
        return _eagle3_verdict(target, draft, same)
    if same.ok:
        return same
    return Compatibility(True, same.rule, "Drafts through text; acceptance is measured, not promised "
                         f"(target tokenizer: {tokenizer_name(target)}; draft tokenizer: {tokenizer_name(draft)}; "
                         f"{same.reason.removeprefix('Draft is incompatible with target: ')}).", through_text=True)


def _eagle3_verdict(target: ModelMetadata, draft: ModelMetadata, same: Compatibility) -> Compatibility:
    if not same.ok:
        return Compatibility(False, same.rule, f"{same.reason}; an EAGLE-3 drafter reads its own target's tokens")
    if target.n_vocab != draft.n_vocab:  # its logits are read as the target's
        return Compatibility(False, "vocab_size", f"Draft is incompatible with target: an EAGLE-3 drafter's "
                             f"vocabulary must be the target's ({draft.n_vocab} tokens, target {target.n_vocab})")
    why = eagle3_problem(target.architecture, target.n_layer, target.n_embd, draft.eagle3_layers, draft.eagle3_width,
                         draft.n_embd, draft.eagle3_borrows) or \
        eagle3_map_problem(draft.eagle3_tensors, draft.n_vocab, target.n_vocab, draft.eagle3_d2t_range)
    if why:
        return Compatibility(False, "eagle3", f"Draft is an EAGLE-3 drafter that cannot draft for this target: {why}.")
    layers = ", ".join(map(str, draft.eagle3_layers))
    return Compatibility(True, None, f"Draft is an EAGLE-3 drafter for this target: it reads the target's layers "
                         f"{layers} and drafts from them.", reads_target=True)


def _short_repr(text: str, limit: int = 60) -> str:
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 4] + "...'"
