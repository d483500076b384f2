"""One factory per drafter kind: what the loader calls, once the target is loaded, to
build the drafter ``app/drafter_kinds.py`` declares (each kind names its factory there).

Every factory takes a ``DrafterLoad`` and returns a ``Built``: the drafter, a draft
model the pair owns (closed with it), or the one line saying why nothing drafts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from app.backends.head_files import forget
from app.backends.llama.backend import LlamaBackend
from app.backends.model_check import require_model_runs
from app.engine.errors import EngineError
from app.engine.gguf.meta import Compatibility
from app.engine.gguf.model_file import ModelFile
from app.engine.speculation.drafter_interface import Drafter
from app.engine.speculation.drafters import EagleDrafter, HeadDrafter, LookupDrafter, ModelDrafter
from app.engine.speculation.lookahead import LookaheadDrafter
from app.engine.speculation.text_bridge import BridgeMode, TextBridge

# (what is loading, fraction done) -> False to cancel
LoadProgress = Callable[[str, float], bool | None]


@dataclass
class DrafterLoad:
    """What a factory builds from: the loaded target and the load's options."""

    target: LlamaBackend
    draft_file: ModelFile | None          # the draft file named, where the kind needs one
    compatibility: Compatibility | None   # the pair check of that file against the target
    compact_head: Path | None             # a float MTP head's compact copy, where one was made
    draft_gpu_layers: int
    n_threads: int
    flash_attention: str
    through_text: BridgeMode
    report: LoadProgress


@dataclass
class Built:
    drafter: Drafter | None
    draft: LlamaBackend | None = None  # a draft model the pair owns
    note: str = ""                     # why nothing drafts, where nothing does


def checked(path: ModelFile, what: str, report: LoadProgress) -> Callable[[float], bool | None]:
    """Trial-load ``path`` (first half of its progress bar, when a trial runs); returns
    the progress callback for the real load (the rest of the bar)."""
    check = require_model_runs(path, progress=lambda f: report(what, f / 2))
    if check.cached:
        return lambda f: report(what, f)
    return lambda f: report(what, 0.5 + f / 2)


def draft_model(load: DrafterLoad) -> Built:
    """A draft model: token for token where the vocabularies agree, else through text."""
    if load.draft_file is None:
        return Built(None, note="no draft model is set")
    if not load.compatibility.ok:
        return Built(None, note=load.compatibility.reason)
    target = load.target
    draft = LlamaBackend(load.draft_file, n_ctx=target.n_ctx, n_gpu_layers=load.draft_gpu_layers,
                         n_threads=load.n_threads, flash_attention=load.flash_attention,
                         exact_batches=False,  # a draft's logits only steer guesses
                         rs_snapshots=0,  # its single-token steps leave none to use
                         progress=checked(load.draft_file, "draft", load.report))
    drafter = (TextBridge(draft, target, load.through_text) if load.compatibility.through_text else
               ModelDrafter(draft, target.n_vocab, eog_ids=target.eog_ids))
    return Built(drafter, draft)


def eagle3(load: DrafterLoad) -> Built:
    """An EAGLE-3 drafter file: a head of the target's, from a file of its own."""
    if load.draft_file is None:
        return Built(None, note="no EAGLE-3 drafter file is set")
    if not load.compatibility.ok:
        return Built(None, note=load.compatibility.reason)
    if not load.compatibility.reads_target:
        return Built(None, note="the draft file is not an EAGLE-3 drafter")
    try:
        checked(load.draft_file, "draft", load.report)(1.0)  # its trial load, before this process loads it
        target = load.target
        head = target.eagle_head(load.draft_file, load.draft_file.metadata.eagle3_layers, load.draft_gpu_layers)
        return Built(EagleDrafter(head, target.n_vocab, eog_ids=target.eog_ids))
    except EngineError as exc:
        return Built(None, note=f"the EAGLE-3 drafter could not run: {exc}")


def mtp_head(load: DrafterLoad) -> Built:
    """The target's own MTP head (from its compact copy, where the loader made one)."""
    target = load.target
    try:
        return Built(HeadDrafter(target.mtp_head(load.compact_head), target.n_vocab, eog_ids=target.eog_ids))
    except EngineError as exc:
        if load.compact_head is not None:
            forget(load.compact_head)  # made again at the next load
        return Built(None, note=f"its MTP head could not run: {exc}")


def prompt_lookup(load: DrafterLoad) -> Built:
    return Built(LookupDrafter(load.target.n_vocab, eog_ids=load.target.eog_ids))


def lookahead(load: DrafterLoad) -> Built:
    return Built(LookaheadDrafter(load.target.n_vocab, eog_ids=load.target.eog_ids))
