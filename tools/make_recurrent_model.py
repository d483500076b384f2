"""Write a tiny random-weight recurrent or hybrid GGUF model (and its draft), for measurements.

    python tools/make_recurrent_model.py ARCH PATH [--draft PATH] [--vocab-from GGUF] [--seed N]
                                         [--ftype Q8_0|F16|F32] [--draft-ftype Q4_0] [--set FIELD=VALUE ...]
    python tools/make_recurrent_model.py ARCH PATH --mtp [--set n_embd=512 ...]
    python tools/make_recurrent_model.py qwen35 PATH --mtp --eagle3 DRAFTER_PATH
    python tools/make_recurrent_model.py gemma4 PATH [--assistant PATH] [--dflash PATH [--block-size N]]
    python tools/make_recurrent_model.py qwen35 PATH --mtp --dflash PATH
    python tools/make_recurrent_model.py --list

ARCH is one of tests/recurrent_models.py's ARCHITECTURES (mamba, mamba2, lfm2, qwen35,
nemotron_h, granitehybrid, jamba, falcon-h1); the vocabulary and chat template come
from ``--vocab-from`` (default: the demo draft, provisioned on first use). ``--set``
changes a size of tests/recurrent_models.Shape (``--set n_layer=8 --set n_embd=128``).
``--draft`` also writes a quantised copy, the natural draft of a random model. ``--mtp``
gives the model an MTP head built to agree with it part of the time (qwen35, and the
attention-only glm4moe; tests/recurrent_models.MTP_SHAPE), for ``--drafter mtp``.
``--eagle3`` also writes an EAGLE-3 drafter for the model (tests/eagle_models.py), reading
its first, middle and last layers, that agrees with a quiet (``--mtp``) trunk part of the
time; name it with ``--draft``.

``gemma4`` writes a Gemma 4 target (tests/gemma4_models.py: sliding-window and global
layers; ``--set`` changes a size of its Gemma4Shape). ``--assistant`` also writes its
Gemma 4 assistant (``gemma4-assistant``, for llama-server's ``--spec-type draft-mtp``),
and ``--dflash`` a DFlash drafter (``dflash``, ``--spec-type draft-dflash``;
tests/dflash_models.py) for a gemma4, qwen35, lfm2 or nemotron_h target. Both agree with
a quiet trunk part of the time: for gemma4 either implies ``--mtp`` (GEMMA4_QUIET); give
qwen35 ``--mtp`` yourself. Example:

    python tools/make_recurrent_model.py lfm2 /tmp/lfm2.gguf --draft /tmp/lfm2.q4.gguf
    tandem generate --target /tmp/lfm2.gguf --draft /tmp/lfm2.q4.gguf --prompt "Hello"
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]  # the checkout's app and the generator

from recurrent_models import (ARCHITECTURES, ATTENTION_ARCHITECTURES, MTP_ARCHITECTURES, MTP_SHAPE,  # noqa: E402
                              TARGET_TYPES, Shape, write_draft_copy, write_recurrent_model)


def _sizes(pairs: list[str]) -> dict[str, object]:
    fields = {f.name: f.type for f in dataclasses.fields(Shape)}
    sizes: dict[str, object] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in fields or not value:
            raise SystemExit(f"--set {pair}: expected FIELD=VALUE, FIELD one of {', '.join(fields)}")
        sizes[name] = float(value) if fields[name] in (float, "float") else int(value)
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("arch", nargs="?", choices=[*ARCHITECTURES, *ATTENTION_ARCHITECTURES, "gemma4"])
    parser.add_argument("path", nargs="?", type=Path)
    parser.add_argument("--draft", type=Path, help="also write a quantised copy here")
    parser.add_argument("--vocab-from", type=Path, help="GGUF whose tokenizer to copy (default: the demo draft)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ftype", choices=TARGET_TYPES, default="Q8_0")
    parser.add_argument("--draft-ftype", default="Q4_0")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--mtp", action="store_true", help="with an MTP head that agrees part of the time "
                        f"({', '.join(MTP_ARCHITECTURES)})")
    parser.add_argument("--eagle3", type=Path, help="also write an EAGLE-3 drafter for the model here")
    parser.add_argument("--assistant", type=Path, help="gemma4: also write its Gemma 4 assistant here")
    parser.add_argument("--dflash", type=Path, help="also write a DFlash drafter for the model here "
                        f"({', '.join(DFLASH_TARGETS)})")
    parser.add_argument("--block-size", type=int, default=3, help="the DFlash drafter's block (default 3: "
                        "two tokens drafted a round)")
    parser.add_argument("--list", action="store_true", help="list the architectures and exit")
    opts = parser.parse_args(argv)
    if opts.dflash and opts.arch is not None and opts.arch not in DFLASH_TARGETS:
        parser.error(f"--dflash: one of {', '.join(DFLASH_TARGETS)} (llama.cpp hands no layer inputs out of "
                     f"a '{opts.arch}' target)")
    if opts.assistant and opts.arch != "gemma4":
        parser.error("--assistant: gemma4 only")
    if opts.block_size < 2:
        parser.error("--block-size: at least 2 (the last token and one mask)")
    if opts.list:
        for a in [*ARCHITECTURES.values(), *ATTENTION_ARCHITECTURES.values()]:
            rollback = "n_rs_seq rollback" if a.rs_rollback else "no n_rs_seq rollback"
            print(f"{a.name:14s} {a.memory:9s} {rollback:20s} {a.note}")
        print(f"{'gemma4':14s} {'attention':9s} {'':20s} Gemma 4: sliding-window layers, a global one "
              "every sixth and last (--assistant, --dflash)")
        return 0
    if opts.arch is None or opts.path is None:
        parser.error("ARCH and PATH are required (or --list)")
    if opts.mtp and opts.arch not in (*MTP_ARCHITECTURES, "gemma4"):
        parser.error(f"--mtp: one of {', '.join(MTP_ARCHITECTURES)}, gemma4")
    vocab = opts.vocab_from
    if vocab is None:
        from app.models.demo import demo_pair

        vocab = demo_pair().draft
    if opts.arch == "gemma4":
        return _gemma4(opts, vocab, parser)
    sizes = {**(MTP_SHAPE if opts.mtp else {}), **_sizes(opts.set)}
    target = _written(lambda: write_recurrent_model(opts.path, opts.arch, vocab_from=vocab, seed=opts.seed,
                                                    ftype=opts.ftype, **sizes))
    if opts.eagle3:
        from eagle_models import write_eagle3_drafter

        drafter = _written(lambda: write_eagle3_drafter(target, opts.eagle3, seed=opts.seed))
    if opts.dflash:
        _write_dflash(target, opts)
    if opts.draft:
        draft = _written(lambda: write_draft_copy(target, opts.draft, opts.draft_ftype))
    return 0


# Targets a DFlash drafter can read: llama.cpp hands their layer inputs out
# (``res->t_layer_inp`` in src/models/<arch>.cpp); others abort in llama-graph.cpp
# ("layer input tensor is null").
DFLASH_TARGETS = ("gemma4", "qwen35", "lfm2", "nemotron_h")


def _gemma4_sizes(pairs: list[str]) -> dict[str, object]:
    from gemma4_models import Gemma4Shape

    fields = {f.name: f.type for f in dataclasses.fields(Gemma4Shape)}
    sizes: dict[str, object] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in fields or not value:
            raise SystemExit(f"--set {pair}: expected FIELD=VALUE, FIELD one of {', '.join(fields)}")
        sizes[name] = float(value) if fields[name] in (float, "float") else int(value)
    return sizes


def _gemma4(opts: argparse.Namespace, vocab: Path, parser: argparse.ArgumentParser) -> int:
    """A Gemma 4 target, and its assistant and DFlash drafter when asked for."""
    from gemma4_models import GEMMA4_QUIET, write_gemma4_assistant, write_gemma4_model

    if opts.eagle3:
        parser.error("--eagle3: not for gemma4 (this llama.cpp's EAGLE-3 reads Llama, Qwen and a few more)")
    quiet = opts.mtp or opts.assistant or opts.dflash
    sizes = {**(GEMMA4_QUIET if quiet else {}), **_gemma4_sizes(opts.set)}
    target = _written(lambda: write_gemma4_model(opts.path, vocab_from=vocab, seed=opts.seed, ftype=opts.ftype,
                                                 **sizes))
    if opts.assistant:
        assistant = _written(lambda: write_gemma4_assistant(target, opts.assistant, seed=opts.seed))
    if opts.dflash:
        _write_dflash(target, opts)
    if opts.draft:
        draft = _written(lambda: write_draft_copy(target, opts.draft, opts.draft_ftype))
    return 0


def _written(write) -> Path:
    """``write()``'s file, said with its size and how long it took."""
    started = time.perf_counter()
    path = write()
    print(f"{path}  {path.stat().st_size / 1e6:.1f} MB  {time.perf_counter() - started:.1f} s")
    return path


def _write_dflash(target: Path, opts: argparse.Namespace) -> None:
    from dflash_models import write_dflash_drafter

    _written(lambda: write_dflash_drafter(target, opts.dflash, block_size=opts.block_size,
                                          seed=opts.seed))


if __name__ == "__main__":
    sys.exit(main())
