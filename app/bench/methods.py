"""``tandem bench --method``: which way of speculating the bench measures.

Each drafter kind's method is declared with the kind (``app/drafter_kinds.py``, its
``bench``), so a new kind is measured with no edit here: one that needs nothing, or a head
in the target, runs the target alone with it (a target without that head says so as it
loads); one that needs a draft file runs the ``--draft`` given (of the architecture the
kind declares, where it declares one). A method may be refined here with a check or a
line of its own:

- ``chain``: the draft model as given (or the demo draft), drafting in a straight line.
- ``lookup``: prompt lookup alone: copies from the context, no draft model.
- ``lookahead``: no draft model: the target's own n-gram pool (a Jacobi window in its
  batches, ``engine/speculation/lookahead.py``) and copies; where the wider batch does not pay, its
  policy stops carrying the window and the run says so.
- ``mtp``: the target's own MTP head (``app/backends/llama/mtp_head.py``), no draft model;
  ``auto`` takes it too for a target that ships one and no draft named.
- ``eagle3``: the EAGLE-3 drafter file given (``--draft``), reading the target's layers.

The bench's own methods are ways of running a draft model, and the app's choice:

- ``tree``: the draft model with token trees on wherever it is unsure (``SpecConfig.tree``);
  ``chain`` turns them off, ``auto`` leaves ``--tree`` as given (auto: the app's policy).
- ``text``: the draft given (``--draft``), of another vocabulary than the target's,
  drafting through text (``engine/speculation/text_bridge.py``) in every round its draft length
  allows: the bridge's own acceptance and speed. ``auto`` with such a draft lets the
  bridge's policy turn it off where it does not pay (the run says so).
- ``self``: a draft made from the target itself (``tandem make-draft``): ``--draft FILE``
  names one, else ``--self-variant`` / ``--self-layers`` pick one, made first if it was
  not made before (remembered per target, so a second bench reuses it).
- ``auto``: what the app itself would use for this target: the draft given, else the
  newest draft made from it, else the demo draft.

A method this build lacks is registered with no ``prepare`` and says so in one line, so
the flag's choices stay one list.

Each method prepares the command line's model options before the models load; the
bench itself (``bench.py``) then runs as always.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from app.drafter_kinds import DEFAULT as DEFAULT_DRAFTER
from app.drafter_kinds import KindSpec, Needs, declared
from app.errors import TandemError
from app.vocabulary import DrafterKind

# (the bench's arguments, a progress callback) -> a line saying what runs
Prepare = Callable[[argparse.Namespace, Callable], str]


class MethodUnavailable(TandemError):
    pass


@dataclass(frozen=True)
class Method:
    name: str
    about: str
    prepare: Prepare | None  # None: not available in this build


_METHODS: dict[str, Method] = {}  # the bench's own, beside the kinds' methods
_REFINED: dict[str, Prepare] = {}  # a kind's method, prepared here rather than from its needs


def register(name: str, about: str, prepare: Prepare | None) -> None:
    _METHODS[name] = Method(name, about, prepare)


def refine(name: str, prepare: Prepare) -> None:
    _REFINED[name] = prepare


def methods() -> dict[str, Method]:
    """Every method: each declared kind's (in the table's order), then the bench's own."""
    kinds = {spec.bench.name: Method(spec.bench.name, spec.bench.about,
                                     _REFINED.get(spec.bench.name) or _for_kind(spec))
             for spec in declared() if spec.bench is not None}
    return {**kinds, **_METHODS}


def names() -> list[str]:
    return list(methods())


def prepare(args: argparse.Namespace, progress: Callable) -> str:
    """Set up ``args`` for ``args.method``; MethodUnavailable (one line) when it cannot run."""
    method = methods()[args.method]
    if method.prepare is None:
        raise MethodUnavailable(f"--method {method.name} ({method.about}) is not available in this build")
    return method.prepare(args, progress)


def add_arguments(bench: argparse.ArgumentParser) -> None:
    from app.terminal.arg_types import whole
    from app.engine.speculation.self_draft import DEFAULT_VARIANT, SMALL_TARGET_VARIANT

    bench.add_argument("--method", choices=names(), default="auto",
                       help="how to speculate: " + "; ".join(f"{m.name}: {m.about}" for m in methods().values())
                            + " (default: %(default)s)")
    bench.add_argument("--self-variant", default=None, metavar="TYPE",
                       help="--method self: the quantisation of the draft made from the target (default: "
                            f"{DEFAULT_VARIANT} for a float or Q8_0 target, else {SMALL_TARGET_VARIANT})")
    bench.add_argument("--self-layers", type=whole(1, 4096, what="a number of layers"), default=None, metavar="N",
                       help="--method self: keep only the target's first N layers (default: all)")


# -- the kinds' methods ----------------------------------------------------------------


def _for_kind(spec: KindSpec) -> Prepare:
    """A kind's method from its declaration: the kind chosen as a user chooses it, with
    the draft file it needs (checked against the architecture it declares) or none."""
    name, word = spec.bench.name, str(spec.chosen_as or spec.kind)

    def prepare_kind(args: argparse.Namespace, progress: Callable) -> str:
        from app.engine.gguf.header import shown_name

        if spec.needs is not Needs.DRAFT_FILE:
            args.drafter, args.draft = word, None
            return f"{name}: {spec.bench.about}"
        if spec.architecture:
            from app.engine.gguf.model_file import open_model_file

            if not args.draft:
                raise MethodUnavailable(f"--method {name} needs --draft: a file of architecture {spec.architecture}")
            found = open_model_file(args.draft).metadata.architecture
            if found != spec.architecture:
                raise MethodUnavailable(f"--method {name}: {shown_name(args.draft)} is of architecture "
                                        f"{found or 'none'}, not {spec.architecture}")
        args.drafter = word
        return f"{name}: {spec.bench.about}" + (f" ({shown_name(args.draft)})" if args.draft else "")

    return prepare_kind


# -- the methods of this build -------------------------------------------------------


def _chain(args: argparse.Namespace, progress: Callable) -> str:
    args.tree = "off"
    return "chain: the draft model, straight drafts"


def _tree(args: argparse.Namespace, progress: Callable) -> str:
    args.tree = "on"
    return "tree: the draft model, second candidates where it is unsure and forked copies (SpecConfig.tree on)"


def _lookahead(args: argparse.Namespace, progress: Callable) -> str:
    from app.engine.speculation.lookahead import NGRAM, WINDOW

    args.drafter, args.draft = DrafterKind.LOOKAHEAD.value, None
    return (f"lookahead: the target alone, its Jacobi window ({WINDOW} columns, {NGRAM}-grams) "
            "and copies from the context, no draft model")


def _text(args: argparse.Namespace, progress: Callable) -> str:
    from app.engine.gguf.header import shown_name

    if not args.draft:
        raise MethodUnavailable("--method text needs --draft: a draft model whose vocabulary is not the target's")
    args.drafter, args.through_text = DrafterKind.MODEL.value, "on"
    return f"text: {shown_name(args.draft)} drafting through text, in every round (its policy off)"


def _target(args: argparse.Namespace):
    if args.target:
        return args.target
    from app.models.demo import demo_pair

    return demo_pair().target


def _self(args: argparse.Namespace, progress: Callable) -> str:
    from app.engine.gguf.header import shown_name

    args.drafter = DrafterKind.MODEL.value
    if args.draft:
        return f"self: the draft given, {shown_name(args.draft)}"
    from app.backends.draft_maker import make_draft
    from app.engine.speculation.self_draft import plan_draft
    from app.storage.made_drafts import find_made

    target = _target(args)
    plan = plan_draft(target, args.self_variant, args.self_layers)
    layers = plan.keep_layers if plan.keep_layers < plan.n_layer else None
    made = find_made(plan.source, plan.variant, layers)
    if made is None:
        path = make_draft(plan, progress=lambda fraction, stage: progress(stage, fraction, 1.0)).path
    else:
        path = made.draft
    args.target, args.draft = target, path
    return f"self: {plan.describe()} made from {shown_name(target)}"


def _mtp(args: argparse.Namespace, progress: Callable) -> str:
    from app.engine.gguf.header import shown_name
    from app.engine.gguf.model_file import open_model_file

    meta = open_model_file(_target(args)).metadata
    if meta.mtp_layers <= 0 or meta.mtp_problem is not None:
        raise MethodUnavailable(f"--method mtp: {shown_name(_target(args))}: "
                                f"{meta.mtp_problem or 'the target has no MTP head'}")
    args.drafter, args.draft = DrafterKind.MTP.value, None
    return f"mtp: the target's own MTP head ({meta.mtp_layers} layer{'s' if meta.mtp_layers > 1 else ''}), no draft model"


def _auto(args: argparse.Namespace, progress: Callable) -> str:
    from app.engine.gguf.header import shown_name
    from app.engine.gguf.model_file import open_model_file
    from app.storage.made_drafts import made_for

    if args.draft or not args.target:
        return "auto: chain, the draft model given" if args.draft else "auto: chain, the demo draft"
    meta = open_model_file(args.target).metadata
    if meta.mtp_layers > 0 and meta.mtp_problem is None:  # it ships its drafter: the load takes it
        return "auto: mtp, the target's own MTP head"
    made = made_for(args.target)
    if made:
        args.draft, args.drafter = made[0].draft, DEFAULT_DRAFTER.value
        return f"auto: self, {shown_name(made[0].draft)} made from the target"
    return "auto: chain (no draft given or made for this target)"


refine("chain", _chain)
refine("lookahead", _lookahead)
refine("mtp", _mtp)
register("tree", "token trees verified in one batch", _tree)
register("text", "a draft of another vocabulary, through text", _text)
register("self", "a draft made from the target (tandem make-draft)", _self)
register("auto", "what the app would use for this target", _auto)
