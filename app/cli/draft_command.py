"""``tandem make-draft TARGET``: a draft written from the target itself (quantised and/or
its first N layers), with a progress bar; Ctrl+C stops it and keeps nothing.

The made file's path goes to stdout (for scripts); everything else to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.terminal.arg_types import whole


def add_parser(commands) -> None:
    from app.engine.speculation.self_draft import DEFAULT_VARIANT, KEEP_TYPE, SMALL_TARGET_VARIANT, VARIANTS

    make = commands.add_parser(
        "make-draft", help="write a draft from a target model (quantised and/or its first layers)",
        description="Write a draft for TARGET from TARGET itself, into Tandem's data folder, and "
                    "remember it for TARGET (the model library offers it first).")
    make.add_argument("target", type=Path, metavar="TARGET", help="the target GGUF")
    make.add_argument("--variant", default=None, metavar="TYPE",
                      help="quantisation: " + ", ".join(VARIANTS) + f", or {KEEP_TYPE} (the target's own "
                           f"types, with --layers); IQ1/IQ2 types need an importance matrix "
                           f"(default: {DEFAULT_VARIANT} for a float or Q8_0 target, else {SMALL_TARGET_VARIANT})")
    make.add_argument("--layers", type=whole(1, 4096, what="a number of layers"), default=None, metavar="N",
                      help="keep only the first N layers (early exit, the target's own output head); "
                           "only for architectures whose layers are all alike (default: all layers)")
    make.add_argument("--force", action="store_true", help="write it again even if it was made before")


def cmd_make_draft(args: argparse.Namespace) -> int:
    from app.backends.draft_maker import DraftCancelled, make_draft, megabytes, space_line
    from app.engine.gguf.header import shown_name
    from app.engine.speculation.self_draft import plan_draft
    from app.storage.made_drafts import find_made
    from app.terminal.shared import TerminalProgress

    plan = plan_draft(args.target, args.variant, args.layers)
    layers = plan.keep_layers if plan.keep_layers < plan.n_layer else None
    made = None if args.force else find_made(plan.source, plan.variant, layers)
    if made is not None:
        print(f"Already made for {shown_name(plan.source)} on {made.made} (--force writes it again)",
              file=sys.stderr)
        print(made.draft)
        return 0
    print(space_line(plan), file=sys.stderr)
    progress = TerminalProgress()
    try:
        result = make_draft(plan, progress=lambda fraction, stage: progress(stage, fraction, 1.0))
    except (KeyboardInterrupt, DraftCancelled):
        progress.done()
        print("tandem: making the draft was cancelled; nothing was kept", file=sys.stderr)
        return 130
    progress.done()
    print(f"Made {shown_name(result.path)} ({megabytes(result.size)}, {result.seconds:.0f} s), checked, and "
          f"remembered for {shown_name(plan.source)}. Chat with it: tandem chat --target {args.target} "
          f"--draft {result.path}", file=sys.stderr)
    print(result.path)
    return 0
