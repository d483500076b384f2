"""The draft finder: for a chosen target, which library entries can draft for it, best
first, and why each of the others cannot.

The verdict is ``tandem check-pair``'s metadata rules (``check_compatibility``,
``app/engine/gguf/meta.py``), not a second copy
of them: from the cached tokenizer facts first, which settle every rule but the
token texts; two files with the same token digest share them; for the rest both
headers are read again and the rule run on the real vocabularies. The trial load that
check-pair adds comes when the pair is loaded (or "Check speculation" is run).

Best first: drafts Tandem made from this very target (``tandem make-draft``, remembered in
``storage/made_drafts.py``; the same weights, so they need no vocabulary check), then
compatible drafts of the target's architecture, then those with the very
same vocabulary, then smaller files before larger (a draft pays only when it is much
cheaper to run than the target; one not smaller than the target is listed last, said so).
A draft of another vocabulary drafts through text (docs/cross-vocabulary.md): it is
listed after every same-vocabulary draft, marked as such, since its acceptance is
measured, not promised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.drafter_kinds import recognised_architectures
from app.engine.errors import ModelFileError
from app.engine.gguf.draft_heads import HIDDEN_STATE_DRAFTERS
from app.engine.gguf.meta import ModelMetadata, check_compatibility, pair_verdict
from app.engine.gguf.memory_kinds import ATTENTION, file_memory_note, memory_kind
from app.engine.gguf.model_file import open_model_file
from app.library.entries import LibraryEntry, Vocabulary
from app.storage.made_drafts import MadeDraft, made_for


@dataclass(frozen=True)
class DraftCandidate:
    entry: LibraryEntry
    compatible: bool
    reason: str          # why not, or what makes it a good draft
    size_ratio: float    # target size / draft size: 8.0 means the draft is 8x smaller
    same_architecture: bool
    same_vocabulary: bool
    made_from_target: str = ""  # how Tandem made it from this very target ("Q4_0"), "" if it did not
    through_text: bool = False  # another vocabulary: it drafts through text (text_bridge.py)


def find_drafts(target: LibraryEntry, library: list[LibraryEntry]) -> list[DraftCandidate]:
    """Every other usable entry judged as a draft for ``target``: compatible ones best
    first, then the incompatible ones with the reason. Reads a header only where the
    cached facts cannot settle the token-text rule."""
    if not target.usable:
        return []
    target_meta: ModelMetadata | None = None
    target_error: str | None = None
    candidates = []
    made = {d.draft: _made_words(d) for d in made_for(target.path)}
    for entry in library:
        if entry.path == target.path or not entry.usable:
            continue
        how = made.get(os.path.realpath(entry.path))
        if how:  # the target's own weights, re-encoded: nothing to compare
            ratio = target.size / entry.size if entry.size else 0.0
            candidates.append(DraftCandidate(entry, True, f"made from this model ({how})", ratio, True, True, how))
            continue
        ratio = target.size / entry.size if entry.size else 0.0
        if entry.architecture in HIDDEN_STATE_DRAFTERS:  # made for one target: judged on its header
            if target_meta is None and target_error is None:
                target_meta, target_error = _read(target)
            candidates.append(_reader_of_layers(target_meta, target_error, entry, ratio))
            continue
        same_arch = bool(target.architecture) and entry.architecture == target.architecture
        same_vocab = entry.vocabulary.digest == target.vocabulary.digest
        verdict = check_compatibility(_stub(target), _stub(entry))
        if verdict.ok and not same_vocab:
            # Only the token texts are left to compare: read both vocabularies.
            if target_meta is None and target_error is None:
                target_meta, target_error = _read(target)
            draft_meta, draft_error = _read(entry)
            error = target_error or draft_error
            if error:
                candidates.append(DraftCandidate(entry, False, error, ratio, same_arch, same_vocab))
                continue
            verdict = check_compatibility(target_meta, draft_meta)
        if not verdict.ok:
            why = verdict.reason.removeprefix("Draft is incompatible with target: ")
            candidates.append(DraftCandidate(
                entry, True, f"another vocabulary ({why}): drafts through text; acceptance is measured, "
                             "not promised" + ("" if ratio > 1.0 else "; not smaller than the target"),
                ratio, same_arch, same_vocab, through_text=True))
            continue
        candidates.append(DraftCandidate(entry, True, _praise(target, entry, ratio, same_arch, same_vocab),
                                         ratio, same_arch, same_vocab))
    return sorted(candidates, key=_rank)


def _reader_of_layers(target: ModelMetadata | None, target_error: str | None, entry: LibraryEntry,
                      ratio: float) -> DraftCandidate:
    """A drafter file that reads its target's hidden states: one whose architecture a
    drafter kind declares (app/drafter_kinds.py: an EAGLE-3 drafter) drafts for a target
    whose layers it can read (``pair_verdict``); the others cannot run yet."""
    if entry.architecture not in recognised_architectures():
        return DraftCandidate(entry, False, f"{HIDDEN_STATE_DRAFTERS[entry.architecture]}, which Tandem cannot "
                                            "run yet", ratio, False, False)
    draft, error = _read(entry)
    if target_error or error:
        return DraftCandidate(entry, False, target_error or error, ratio, False, False)
    verdict = pair_verdict(target, draft)
    if not verdict.ok:
        return DraftCandidate(entry, False, verdict.reason, ratio, False, False)
    layers = ", ".join(map(str, draft.eagle3_layers))
    # Trained on this target's very layers: ranked with the drafts made from it.
    return DraftCandidate(entry, True, f"an EAGLE-3 drafter for this model: reads its layers {layers}", ratio,
                          True, True, made_from_target="EAGLE-3")


def compatible_drafts(target: LibraryEntry, library: list[LibraryEntry]) -> list[DraftCandidate]:
    return [c for c in find_drafts(target, library) if c.compatible]


def _made_words(made: MadeDraft) -> str:
    return made.variant + (f", first {made.layers} layers" if made.layers else "")


def _rank(candidate: DraftCandidate) -> tuple:
    return (not candidate.compatible,
            candidate.through_text,             # another vocabulary: after every same-vocabulary draft
            not candidate.made_from_target,     # made from this very target: first
            candidate.size_ratio <= 1.0,        # not smaller than the target: last of the compatible
            not candidate.same_architecture,
            not candidate.same_vocabulary,
            candidate.entry.size,
            candidate.entry.name.casefold())


def _praise(target: LibraryEntry, draft: LibraryEntry, ratio: float, same_arch: bool, same_vocab: bool) -> str:
    parts = ["same family" if same_arch else f"a {draft.architecture or 'different'} model",
             "the same vocabulary" if same_vocab else "a compatible vocabulary"]
    if ratio > 1.0:
        parts.append(f"{ratio:.1f}x smaller than the target")
    else:
        parts.append("not smaller than the target, so it will not speed it up")
    if memory_kind(target.architecture) != ATTENTION:
        # What a recurrent state costs speculation (docs/recurrent-models.md).
        parts.append("the target " + file_memory_note(target.architecture, as_target=True).split(": ", 1)[1]
                     .replace("token trees off (they need a state per branch), drafts are chains", "drafts are chains"))
    return ", ".join(parts)


def _stub(entry: LibraryEntry) -> ModelMetadata:
    """The cached facts as metadata without token texts, for every rule but that one."""
    v: Vocabulary = entry.vocabulary
    return ModelMetadata(path=Path(entry.path), architecture=entry.architecture, name=entry.model_name,
                         vocab_type=v.vocab_type, tokens=(), n_vocab=v.n_vocab, bos_id=v.bos_id,
                         eos_id=v.eos_id, add_bos=v.add_bos, add_eos=v.add_eos, chat_template=None,
                         context_length=entry.context_length, file_type=None, file_size=entry.size)


def _read(entry: LibraryEntry) -> tuple[ModelMetadata | None, str | None]:
    try:
        return open_model_file(entry.path).metadata, None
    except ModelFileError as exc:
        return None, f"changed since the scan: {exc}"
    except (OSError, ValueError, MemoryError) as exc:
        return None, f"cannot be read again ({exc})"
