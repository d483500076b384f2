"""The drafter kinds, each declared once: its words, what it needs, what builds it.

Every layer reads this one table (a leaf: it imports only ``app.vocabulary``):

- the settings' check and description, the settings dialog's list and hint, and the
  command line's ``--drafter`` choices and help list the kinds a user may choose;
- the side panel and the window's loaded-model line name what was loaded;
- the loader (``app/backends/loader.py``) runs the kind asked for, or the kind a draft
  file's architecture declares, and builds it with the kind's ``factory``;
- ``check-pair`` and the library say which kind a draft file runs as;
- ``tandem bench --method`` offers each kind's bench method.

Adding a drafter kind is one ``DrafterKind`` word (``app/vocabulary.py``, what the
history stores), one ``KindSpec`` below, the drafter class and its factory.

The factory is named as ``"module:function"`` and resolved by the loader: the table
stays a leaf every layer may import (the settings may not import the backends), and a
new kind needs no edit to the loader. ``tests/test_drafter_kinds.py`` resolves every
factory and checks that it lives in the backends or the engine, the layers the loader
may import.

Each accessor reads ``KINDS`` when called, so a table patched in a test is seen by
every front end at once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from app.vocabulary import DrafterKind


class Needs(enum.Enum):
    """What a kind drafts from, beside the target."""

    DRAFT_FILE = "a draft file"         # a model file of its own, named as the draft model
    TARGET_HEAD = "a head in the target"  # shipped in the target's own file
    NOTHING = "nothing"                 # the context and the target alone


@dataclass(frozen=True)
class BenchMethod:
    name: str   # ``tandem bench --method NAME``
    about: str  # its few words in ``--method``'s help


@dataclass(frozen=True)
class KindSpec:
    kind: DrafterKind   # the word settings, the command line and the stats use
    label: str          # the settings dialog's list entry
    # One clause, lower case, no ";" (the help joins them with it): the dialog's hint, the
    # command line's and the settings' help.
    hint: str
    panel: str          # the side panel's drafter label; "{draft}" is the draft file's name
    loaded: str         # the drafter in the window's loaded-model line; "{draft}" likewise
    needs: Needs
    factory: str        # "module:function" the loader calls to build it
    # A draft file of this GGUF architecture runs as this kind ("": none is recognised).
    architecture: str = ""
    # None: a user chooses the kind by its own word. Else the word a user chooses it
    # with: naming a draft file of ``architecture`` under that word runs this kind.
    chosen_as: DrafterKind | None = None
    bench: BenchMethod | None = None  # None: the bench has no method of its own for it

    @property
    def choosable(self) -> bool:
        return self.chosen_as is None


_FACTORIES = "app.backends.drafter_factories"

KINDS: tuple[KindSpec, ...] = (
    KindSpec(DrafterKind.MODEL, "Draft model",
             "a small draft model guesses (a target that ships an MTP head drafts with it when no draft "
             "model is named)",
             panel="{draft}", loaded="draft {draft}", needs=Needs.DRAFT_FILE,
             factory=f"{_FACTORIES}:draft_model", bench=BenchMethod("chain", "a draft model, straight drafts")),
    KindSpec(DrafterKind.LOOKUP, "Prompt lookup (no draft model)",
             "prompt lookup copies from the conversation and needs no draft model",
             panel="prompt lookup (no model)", loaded="prompt lookup", needs=Needs.NOTHING,
             factory=f"{_FACTORIES}:prompt_lookup",
             bench=BenchMethod("lookup", "copies from the context, no draft")),
    KindSpec(DrafterKind.LOOKAHEAD, "Lookahead (the target's own n-grams; no draft model)",
             "lookahead drafts from the target's own n-gram pool and copies, and needs no draft model",
             panel="lookahead (no model)", loaded="lookahead", needs=Needs.NOTHING,
             factory=f"{_FACTORIES}:lookahead",
             bench=BenchMethod("lookahead", "the target's own n-gram pool, no draft")),
    KindSpec(DrafterKind.MTP, "The target's own MTP head (no draft model)",
             "the target drafts with its own MTP head (if its file ships one) and needs no draft model",
             panel="mtp: the target's own head", loaded="its own MTP head", needs=Needs.TARGET_HEAD,
             factory=f"{_FACTORIES}:mtp_head", bench=BenchMethod("mtp", "the target's own MTP head, no draft")),
    # Not a word users choose: an eagle3 file named as the draft model (drafter "model",
    # in the settings or on the command line) runs as this kind, and the stats say so.
    KindSpec(DrafterKind.EAGLE3, "EAGLE-3 drafter",
             "an EAGLE-3 drafter trained on the target drafts from the target's layers (chosen by naming "
             "its file as the draft model)",
             panel="EAGLE-3: {draft}", loaded="EAGLE-3 drafter {draft}", needs=Needs.DRAFT_FILE,
             factory=f"{_FACTORIES}:eagle3", architecture="eagle3", chosen_as=DrafterKind.MODEL,
             bench=BenchMethod("eagle3", "an EAGLE-3 drafter named with --draft")),
)

DEFAULT = DrafterKind.MODEL  # the setting's and the command line's default


def declared() -> tuple[KindSpec, ...]:
    return KINDS


def spec_of(kind: str) -> KindSpec | None:
    """The declaration of ``kind`` (a ``DrafterKind`` or its word); None for NONE or an unknown word."""
    return next((spec for spec in KINDS if spec.kind == kind), None)


def choices() -> tuple[str, ...]:
    """The words a user may choose: the settings' values, ``--drafter``'s choices, the dialog's list."""
    return tuple(str(spec.kind) for spec in KINDS if spec.choosable)


def choosable() -> tuple[KindSpec, ...]:
    return tuple(spec for spec in KINDS if spec.choosable)


def needs(kind: str) -> Needs:
    """What ``kind`` drafts from; NONE (and an unknown word) needs nothing."""
    spec = spec_of(kind)
    return spec.needs if spec is not None else Needs.NOTHING


def runs_as(asked: str, architecture: str) -> str:
    """The kind a draft file of ``architecture`` runs as when ``asked`` is chosen: the
    kind that declares that architecture and is chosen with ``asked``, else ``asked``."""
    for spec in KINDS:
        if spec.architecture and spec.architecture == architecture and (spec.chosen_as or spec.kind) == asked:
            return spec.kind
    return asked


def recognised_architectures() -> tuple[str, ...]:
    """The draft files' architectures some kind runs (a hidden-state drafter file of
    another architecture is recognised, but cannot run)."""
    return tuple(spec.architecture for spec in KINDS if spec.architecture)


def choice_help() -> str:
    """Each choosable kind's word and hint, for the command line's and the settings' help."""
    return "; ".join(f"{spec.kind}: {spec.hint}" for spec in choosable())


def dialog_hint(kind: str) -> str:
    """The dialog's sentence under the list for ``kind``."""
    spec = spec_of(kind)
    if spec is None:
        return ""
    return spec.hint[:1].upper() + spec.hint[1:] + "."


def panel_label(kind: str, draft_name: str) -> str:
    """The side panel's drafter label: what drafts, or "none" when nothing does."""
    spec = spec_of(kind)
    if spec is None or ("{draft}" in spec.panel and not draft_name):
        return draft_name or "none"
    return spec.panel.format(draft=draft_name)


def loaded_words(kind: str, draft_name: str) -> str:
    """The drafter in the window's loaded-model line ("target · this · compute")."""
    spec = spec_of(kind)
    if spec is None or ("{draft}" in spec.loaded and not draft_name):
        return f"draft {draft_name}" if draft_name else "no draft"
    return spec.loaded.format(draft=draft_name)
