"""What every terminal command shares: the model and decoding options (with llama.cpp's
names as aliases), the progress bar, loading a ``ChatSession`` from the arguments, and
the build check. Commands import this module, never each other.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from app.terminal.arg_types import (draft_max_value, gpu_layers_value, seed_value, setting_value, tensor_split,
                                    worker_list)
from app.drafter_kinds import DEFAULT as DEFAULT_DRAFTER
from app.drafter_kinds import choice_help, choices as drafter_choices
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig
from app.errors import TandemError
from app.logs import FILE_ONLY
from app.vocabulary import DRAFT_MAX_RANGE


class UsageError(TandemError):
    """Bad command-line input."""


def add_model_arguments(parser: argparse.ArgumentParser, *, in_command: bool = True) -> None:
    """Model options, with llama.cpp's spellings as aliases (-m, -md, -c, -ngl, -ngld, -t)."""
    # Accepted before or after the command; a command's parser must not reset
    # what was given before it, hence SUPPRESS there (and defaults written into the help).
    def default(value):
        return argparse.SUPPRESS if in_command else value

    group = parser.add_argument_group("models (default: the demo pair)")
    group.add_argument("--target", "-m", "--model", type=Path, metavar="GGUF", default=default(None),
                       help="target GGUF, the model whose output you get (default: the demo target)")
    group.add_argument("--draft", "-md", "--model-draft", type=Path, metavar="GGUF", default=default(None),
                       help="draft GGUF, a small model of the same family, or an EAGLE-3 drafter trained on the target "
                            "(default: the demo draft)")
    group.add_argument("--drafter", choices=drafter_choices(), default=default(DEFAULT_DRAFTER.value),
                       help=f"where guesses come from: {choice_help()} (default: {DEFAULT_DRAFTER})")
    group.add_argument("--n-ctx", "-c", "--ctx-size", type=setting_value("n_ctx"), metavar="N", default=default(4096),
                       help="context size in tokens (default: 4096)")
    group.add_argument("--threads", "-t", type=setting_value("n_threads"), metavar="N", default=default(0),
                       help="CPU threads (default: 0, adaptive: chosen as it runs, fewer while other "
                            "programs keep cores busy; N: always N)")
    group.add_argument("--flash-attn", choices=["auto", "on", "off"], default=default("auto"),
                       help="flash attention (default: auto: on a CPU, decoding runs without it, which "
                            "verifies drafts after a long prompt faster, and a prompt of 512 tokens or more "
                            "is read with it, which reads faster; on throughout for a quantised target or "
                            "a sliding-window model such as Gemma 3)")
    group.add_argument("--gpu-layers", "-ngl", "--n-gpu-layers", type=gpu_layers_value, metavar="N|auto",
                       default=default("auto"),
                       help="target layers offloaded to the GPU (default: auto, as many as fit beside the draft, "
                            "planned before loading: see 'tandem fit'; -1: all)")
    group.add_argument("--draft-gpu-layers", "-ngld", "--n-gpu-layers-draft", type=gpu_layers_value, metavar="N|auto",
                       default=default(None), help="draft layers offloaded to the GPU (default: as --gpu-layers)")
    group.add_argument("--rpc", type=worker_list, metavar="HOST:PORT,...", default=default(()),
                       help="split the target's layers over these llama.cpp RPC workers ('tandem worker' on each "
                            "machine) and this machine's GPUs; the draft stays here (default: none)")
    group.add_argument("--tensor-split", "-ts", type=tensor_split, metavar="N,...", default=default(()),
                       help="each device's share of the target's offloaded layers, workers first in --rpc order, "
                            "then local GPUs (default: in proportion to their free memory)")
    group.add_argument("--chat-format", "--chat-template", metavar="NAME", default=default(None),
                       help="write prompts in llama.cpp's built-in chat format NAME (gemma, llama3, mistral-v7, "
                            "chatml, ...; 'list' names them all), or 'file' for the file's own template "
                            "(default: the one chosen for the file in the window, else the file's own)")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """Decoding options. Their defaults are the window's (``Settings``), so the window,
    ``chat``, ``generate`` and ``serve`` decode alike unless told otherwise."""
    from app.storage.settings import Settings

    app = Settings()
    low, high = DRAFT_MAX_RANGE
    group = parser.add_argument_group("decoding")
    group.add_argument("--no-speculation", action="store_true", help="decode plainly with the target")
    group.add_argument("--draft-max", type=draft_max_value, default=draft_max_value(str(app.draft_max)), metavar="N|auto",
                       help=f"most tokens drafted per round, {low}-{high} or 'auto' (default: %(default)s)")
    group.add_argument("--draft-min", type=setting_value("draft_min"), metavar="N", default=app.draft_min,
                       help="fewer proposals than this: a plain step instead (default: %(default)s)")
    group.add_argument("--p-min", "--draft-p-min", type=setting_value("p_min"), metavar="P", default=app.p_min,
                       help="stop drafting below this draft probability (default: %(default)s)")
    group.add_argument("--no-copy", action="store_true",
                       help="always run the draft model, even where the reply repeats earlier text")
    group.add_argument("--tree", choices=["auto", "on", "off"], default=app.tree,
                       help="token trees: the draft's second guesses verified beside its first in one batch; auto "
                            "where measured to pay, on wherever the draft is unsure, off never (default: %(default)s)")
    add_sampler_arguments(group)
    group.add_argument("--seed", "-s", type=seed_value, metavar="N", default=seed_value(str(app.seed)),
                       help="random seed for sampling, -1 = a new one each run (default: -1)")
    group.add_argument("--max-tokens", "-n", "--n-predict", type=setting_value("max_tokens"), metavar="N",
                       default=app.max_tokens, help="most tokens in a reply (default: %(default)s)")
    group.add_argument("--ignore-eos", action="store_true", help="never stop at end-of-sequence")


def add_sampler_arguments(group) -> None:
    """Temperature, top-k, top-p and min-p: their ranges and defaults the settings' own
    (every command that samples takes them from here)."""
    from app.storage.settings import Settings

    app = Settings()
    group.add_argument("--temperature", "--temp", type=setting_value("temperature"), metavar="T",
                       default=app.temperature, help="sampling temperature, 0 = greedy (default: %(default)s)")
    group.add_argument("--top-k", type=setting_value("top_k"), metavar="K", default=app.top_k,
                       help="keep the k likeliest tokens, 0 = all (default: %(default)s)")
    group.add_argument("--top-p", type=setting_value("top_p"), metavar="P", default=app.top_p,
                       help="nucleus sampling mass, 1 = off (default: %(default)s)")
    group.add_argument("--min-p", type=setting_value("min_p"), metavar="P", default=app.min_p,
                       help="drop tokens below this share of the likeliest, 0 = off (default: %(default)s)")


def sampling_from(args: argparse.Namespace, seed: int | None = None) -> SamplingConfig:
    return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          min_p=args.min_p, seed=args.seed if seed is None else seed,
                          ignore_eos=args.ignore_eos)


def spec_from(args: argparse.Namespace) -> SpecConfig:
    from app.session.config import speculation

    return speculation(not args.no_speculation, args.draft_max, args.draft_min, args.p_min, copy=not args.no_copy,
                       tree=args.tree)


class TerminalProgress:
    """A one-line progress bar on stderr (only when stderr is a terminal, or always if forced)."""

    def __init__(self, stream=sys.stderr) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self._last = ""

    def __call__(self, stage: str, done: float, total: float = 1.0) -> None:
        if not self.live:
            # Logs and pipes get one line per stage, not a redrawn bar.
            if stage != self._last:
                self.stream.write(f"{stage} ...\n")
                self._last = stage
            return
        if total:
            fraction = min(1.0, done / total)
            bar = "#" * int(fraction * 30)
            size = f" {done / 1e6:.1f}/{total / 1e6:.1f} MB" if total > 1 else ""
            line = f"{stage:<36} [{bar:<30}] {fraction * 100:3.0f}%{size}"
        else:
            line = f"{stage} ..."
        self.stream.write("\r" + line.ljust(len(self._last)))
        self.stream.flush()
        self._last = line

    def done(self) -> None:
        if self.live and self._last:
            self.stream.write("\n")
        self._last = ""


def model_spec(args: argparse.Namespace):
    """The models the command line asks for (the demo pair without a target)."""
    from app.session.config import ModelSpec

    return ModelSpec(target_path=named_model(args.target), draft_path=named_model(args.draft),
                     drafter=DrafterKind(args.drafter),
                     n_ctx=args.n_ctx,
                     target_gpu_layers=args.gpu_layers, draft_gpu_layers=draft_gpu_layers(args),
                     n_threads=args.threads, flash_attention=args.flash_attn, chat_format=chat_format(args),
                     rpc_workers=tuple(getattr(args, "rpc", ())),
                     tensor_split=tuple(getattr(args, "tensor_split", ())),
                     through_text=getattr(args, "through_text", "auto"))


def named_model(path: Path | None) -> str:
    """A model argument as a path: a file that exists as it is, else a model the library
    names from the Hugging Face cache ("org/repo/file.gguf", what 'tandem pull' prints);
    anything else as it is, for the loader to refuse in one line."""
    if not path:
        return ""
    text = str(path)
    if text.startswith("hf:/") and not text.startswith("hf://"):
        text = "hf://" + text[len("hf:/"):]  # Path() folds the double slash
    if os.path.exists(path):
        return text
    from app.library.locations import hub_file

    found = hub_file(text)
    if found is not None:
        return str(found)
    if text.startswith("hf://"):
        raise UsageError(f"{text} is not downloaded; 'tandem pull {text}' fetches it")
    return text


def chat_format(args: argparse.Namespace) -> str:
    """--chat-format, checked against llama.cpp's names; without it, the format the
    window remembers for the target file ('' : the file's own template)."""
    chosen = getattr(args, "chat_format", None)
    if chosen is None:
        from app.storage.settings import remembered_chat_format

        # realpath, not Path.resolve: a symlink loop must reach the loader, which says so in
        # one line (resolve raises RuntimeError on it before Python 3.13).
        return remembered_chat_format(os.path.realpath(Path(named_model(args.target)).expanduser()) if args.target else "")
    if chosen == "file":
        return ""
    from app.backends.llama.builtin_chat_formats import chat_format_names

    names = chat_format_names()
    if chosen == "list":  # like --help: the answer, then done
        print("\n".join(names))
        raise SystemExit(0)
    if chosen not in names:
        raise UsageError(f"--chat-format {chosen!r} is not one of llama.cpp's chat formats: "
                         + ", ".join(names) + " (or 'file' for the file's own template)")
    return chosen


def draft_gpu_layers(args: argparse.Namespace) -> int | str:
    chosen = getattr(args, "draft_gpu_layers", None)
    return args.gpu_layers if chosen is None else chosen


def load(args: argparse.Namespace, progress: TerminalProgress | None = None):
    """A ``ChatSession`` on the command line's models, with a progress bar on stderr."""
    from app.session.loading import load_session

    spec = model_spec(args)
    try:
        session = load_session(spec, progress)
    finally:
        if progress:
            progress.done()
    say_chat_format(session.info, spec)
    if session.info.planned_gpu_bytes:  # on a CPU alone the plan has nothing to say
        print(f"tandem: memory: {session.info.memory_plan}", file=sys.stderr)
    return session


def say_chat_format(info, spec) -> None:
    """The one line on the chat format, when it is not the file's own template."""
    if info.chat_format_notice:
        print(f"tandem: {info.target_name}: {info.chat_format_notice}", file=sys.stderr)
    elif spec.chat_format:
        print(f"tandem: chat format: llama.cpp's '{spec.chat_format}' (chosen for this model)", file=sys.stderr)


def prompt_tokens(target, text: str, *, raw: bool, system: str = "") -> list[int]:
    from app.engine.prompting.chat import build_messages, chat_tokens

    if raw:
        return target.tokenize(text, add_special=True, parse_special=True)
    return chat_tokens(target, build_messages([("user", text)], system))


def summary_line(stats) -> str:
    line = f"[{stats.tokens} tokens, {stats.tokens_per_second:.1f} tok/s"
    if stats.speculative:
        drafter = f"{stats.drafter} " if stats.drafter else ""
        line += (f", {drafter}acceptance {stats.acceptance:.2f}, {stats.tokens_per_round:.2f} tokens/round")
    elif stats.note:
        line += f", plain: {stats.note}"
    if stats.left_out:
        from app.engine.prompting.chat import left_out_text

        line += f", {left_out_text(stats.left_out)}"
    return line + "]"


def ensure_llama_runs() -> None:
    """Refuse, in one line with the rebuild command, a llama.cpp build that dies here."""
    from app.backends.build_check import check_llama_build

    check = check_llama_build()
    if not check.ok:
        logging.getLogger("tandem").error("%s Rebuild: %s", check.message, check.rebuild, extra=FILE_ONLY)
    check.raise_if_broken()
