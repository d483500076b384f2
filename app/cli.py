"""Headless commands: generate, check-pair, chat (terminal), bench, self-test.

Every expected failure is a ``TandemError`` and ends as one line on stderr with a
non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from app.arg_types import draft_max_value, real, regular_file, seed_value, utf8_text, whole
from app.errors import TandemError
from app.logs import FILE_ONLY
from app.prompt_files import read_jsonl, seed_field, text_field
from app.engine.types import DRAFT_MAX_RANGE, SamplingConfig, SpecConfig


class UsageError(TandemError):
    """Bad command-line input."""


# -- argument parsing ---------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (with where to find help), exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(2, f"tandem: error: {message} (see {self.prog} --help)\n")

    def _get_option_tuples(self, option_string: str):
        # llama.cpp's multi-letter single-dash names (-ngl, -md) make "-n" or "-m" look like
        # abbreviations of them, even with allow_abbrev off; keep exact names only ("-n7"
        # is still -n with 7).
        return [t for t in super()._get_option_tuples(option_string) if t[1] in (option_string, option_string[:2])]


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
                       help="draft GGUF, a small model of the same family (default: the demo draft)")
    group.add_argument("--drafter", choices=["model", "lookup"], default=default("model"),
                       help="draft with a model or with prompt lookup, no model (default: model)")
    group.add_argument("--n-ctx", "-c", "--ctx-size", type=whole(16, 2**24), metavar="N", default=default(4096),
                       help="context size in tokens (default: 4096)")
    group.add_argument("--threads", "-t", type=whole(0, 1024), metavar="N", default=default(0),
                       help="CPU threads (default: 0, automatic)")
    group.add_argument("--flash-attn", choices=["auto", "on", "off"], default=default("auto"),
                       help="flash attention (default: auto, off on a CPU where it slows long prompts)")
    group.add_argument("--gpu-layers", "-ngl", "--n-gpu-layers", type=whole(-1, 100_000), metavar="N", default=default(-1),
                       help="target layers offloaded to the GPU (default: -1, all)")
    group.add_argument("--draft-gpu-layers", "-ngld", "--n-gpu-layers-draft", type=whole(-1, 100_000), metavar="N",
                       default=default(None), help="draft layers offloaded to the GPU (default: as --gpu-layers)")


def add_sampling_arguments(parser: argparse.ArgumentParser, *, default_draft_max: str = "5") -> None:
    low, high = DRAFT_MAX_RANGE
    group = parser.add_argument_group("decoding")
    group.add_argument("--no-speculation", action="store_true", help="decode plainly with the target")
    group.add_argument("--draft-max", type=draft_max_value, default=draft_max_value(default_draft_max), metavar="N|auto",
                       help=f"most tokens drafted per round, {low}-{high} or 'auto' (default: %(default)s)")
    group.add_argument("--draft-min", type=whole(1, high), metavar="N", default=1,
                       help="fewer proposals than this: a plain step instead (default: %(default)s)")
    group.add_argument("--p-min", "--draft-p-min", type=real(0.0, 1.0), metavar="P", default=0.0,
                       help="stop drafting below this draft probability (default: %(default)s)")
    group.add_argument("--no-copy", action="store_true",
                       help="always run the draft model, even where the reply repeats earlier text")
    group.add_argument("--temperature", "--temp", type=real(0.0, 100.0), metavar="T", default=0.0,
                       help="sampling temperature, 0 = greedy (default: %(default)s)")
    group.add_argument("--top-k", type=whole(0), metavar="K", default=0, help="keep the k likeliest tokens, 0 = all (default: %(default)s)")
    group.add_argument("--top-p", type=real(0.0, 1.0, low_open=True), metavar="P", default=1.0,
                       help="nucleus sampling mass, 1 = off (default: %(default)s)")
    group.add_argument("--min-p", type=real(0.0, 1.0), metavar="P", default=0.0,
                       help="drop tokens below this share of the likeliest, 0 = off (default: %(default)s)")
    group.add_argument("--seed", "-s", type=seed_value, metavar="N", default=None,
                       help="random seed for sampling, -1 = a new one each run (default: -1)")
    group.add_argument("--max-tokens", "-n", "--n-predict", type=whole(1, 1_000_000), metavar="N", default=256,
                       help="most tokens in a reply (default: %(default)s)")
    group.add_argument("--ignore-eos", action="store_true", help="never stop at end-of-sequence")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tandem", allow_abbrev=False, description=(
        "Chat with a local GGUF model, sped up losslessly by a draft model. "
        "Without a command the chat window opens."))
    parser.add_argument("--version", action="version", version=version_text())
    parser.add_argument("--self-test", action="store_true",
                        help="check that speculation works on this machine, then exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log llama.cpp's messages")
    add_model_arguments(parser, in_command=False)
    commands = parser.add_subparsers(dest="command")

    gen = commands.add_parser("generate", help="generate text for one prompt or a file of prompts")
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", "-p", type=utf8_text, metavar="TEXT", help="the prompt text")
    source.add_argument("--prompts", type=regular_file, metavar="JSONL", help='JSONL file of {"prompt": ..., "seed": ...} lines')
    add_model_arguments(gen)
    add_sampling_arguments(gen)
    gen.add_argument("--raw", action="store_true", help="send the prompt as is, not as a chat message")
    gen.add_argument("--system", type=utf8_text, default="", help="system prompt for chat mode (default: none)")
    gen.add_argument("--json", action="store_true", help="one JSON object per prompt")

    check = commands.add_parser("check-pair", help="can DRAFT speculate for TARGET? (exit 0 yes, 1 no)")
    check.add_argument("target_path", type=Path, metavar="TARGET")
    check.add_argument("draft_path", type=Path, metavar="DRAFT")
    check.add_argument("--json", action="store_true")

    chat = commands.add_parser("chat", help="chat in the terminal")
    add_model_arguments(chat)
    add_sampling_arguments(chat, default_draft_max="auto")
    chat.add_argument("--system", type=utf8_text, default="", help="system prompt (default: none)")

    from app import bench  # the bench command defines its own options
    bench.add_parser(commands, add_model_arguments)
    return parser


def version_text() -> str:
    from importlib import metadata

    from app import __version__

    try:
        llama = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        llama = "not installed"
    return f"tandem {__version__} (llama-cpp-python {llama}, Python {sys.version.split()[0]})"


# -- shared helpers ---------------------------------------------------------------
def sampling_from(args: argparse.Namespace, seed: int | None = None) -> SamplingConfig:
    return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          min_p=args.min_p, seed=args.seed if seed is None else seed,
                          ignore_eos=args.ignore_eos)


def spec_from(args: argparse.Namespace) -> SpecConfig:
    from app.session.config import speculation

    return speculation(not args.no_speculation, args.draft_max, args.draft_min, args.p_min, copy=not args.no_copy)


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

    return ModelSpec(target_path=str(args.target) if args.target else "",
                     draft_path=str(args.draft) if args.draft else "", drafter=args.drafter, n_ctx=args.n_ctx,
                     target_gpu_layers=args.gpu_layers, draft_gpu_layers=draft_gpu_layers(args),
                     n_threads=args.threads, flash_attention=args.flash_attn)


def draft_gpu_layers(args: argparse.Namespace) -> int:
    chosen = getattr(args, "draft_gpu_layers", None)
    return args.gpu_layers if chosen is None else chosen


def load(args: argparse.Namespace, progress: TerminalProgress | None = None):
    """A ``ChatSession`` on the command line's models, with a progress bar on stderr."""
    from app.session.loading import load_session

    try:
        return load_session(model_spec(args), progress)
    finally:
        if progress:
            progress.done()


def prompt_tokens(target, text: str, *, raw: bool, system: str = "") -> list[int]:
    from app.engine.chat import build_messages, chat_tokens

    if raw:
        return target.tokenize(text, add_special=True, parse_special=True)
    return chat_tokens(target, build_messages([("user", text)], system))


# -- commands -------------------------------------------------------------------------
@dataclass
class PromptJob:
    text: str
    seed: int | None


def _read_prompts(path: Path) -> list[PromptJob]:
    jobs = read_jsonl(path, lambda r: PromptJob(text_field(r["prompt"]), seed_field(r.get("seed"))),
                      error=UsageError,
                      expected='a JSON object with a "prompt" text and an optional whole-number "seed" (-1 or more)')
    if not jobs:
        raise UsageError(f"{path} holds no prompts")
    return jobs


def cmd_generate(args: argparse.Namespace) -> int:
    jobs = _read_prompts(args.prompts) if args.prompts else [PromptJob(args.prompt, None)]
    progress = TerminalProgress()
    session = load(args, progress)
    try:
        compatibility = session.compatibility
        if args.drafter == "model" and compatibility and not compatibility.ok and not args.no_speculation:
            print(f"tandem: {compatibility.reason}; generating without speculation", file=sys.stderr)
        spec = spec_from(args)
        for job in jobs:
            tokens = prompt_tokens(session.target, job.text, raw=args.raw, system=args.system)
            generation = session.engine.generate(tokens, sampling_from(args, job.seed), spec, args.max_tokens)
            if args.json:
                events = generation.run()
                print(json.dumps({
                    "tokens": [{"id": e.id, "text": e.text, "kind": e.kind.value} for e in events],
                    "text": "".join(e.text for e in events),
                    "stats": generation.stats.to_dict(),
                }, ensure_ascii=False), flush=True)
            else:
                for event in generation:
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
                sys.stdout.write("\n")
                print(summary_line(generation.stats), file=sys.stderr)
    finally:
        session.close()
    return 0


def summary_line(stats) -> str:
    line = f"[{stats.tokens} tokens, {stats.tokens_per_second:.1f} tok/s"
    if stats.speculative:
        line += (f", acceptance {stats.acceptance:.2f}, {stats.tokens_per_round:.2f} tokens/round")
    elif stats.note:
        line += f", plain: {stats.note}"
    if stats.left_out:
        from app.engine.chat import left_out_text

        line += f", {left_out_text(stats.left_out)}"
    return line + "]"


def cmd_check_pair(args: argparse.Namespace) -> int:
    """Compatible only when the tokenizers agree and both files survive a trial load in a
    child process (remembered per file); a file llama.cpp dies on is a one-line error."""
    from app.backends.loader import check_pair
    from app.engine.gguf_meta import shown_name

    result = check_pair(args.target_path, args.draft_path)
    if args.json:
        print(json.dumps({"compatible": result.ok, "rule": result.rule, "reason": result.reason}))
    else:
        print(result.reason if not result.ok else
              f"Compatible: {shown_name(args.draft_path)} can draft for {shown_name(args.target_path)}.")
    return 0 if result.ok else 1


def cmd_chat(args: argparse.Namespace) -> int:
    """A terminal chat: each reply streams with its speculation summary."""
    progress = TerminalProgress()
    session = load(args, progress)
    history: list[tuple[str, str]] = []
    info = session.info
    print(f"Chatting with {info.target_name}" + (f" (draft: {info.draft_name})" if info.draft_name else "")
          + ". Empty line or Ctrl+D quits.", file=sys.stderr)
    try:
        while True:
            try:
                text = input("you> ").strip()
            except EOFError:
                break
            if not text:
                break
            history.append(("user", text))
            cancel = threading.Event()
            generation = session.reply(history, sampling_from(args), spec_from(args), args.max_tokens,
                                       system_prompt=args.system, cancel=cancel)
            reply = []
            try:
                for event in generation:
                    reply.append(event.text)
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
            except KeyboardInterrupt:
                cancel.set()
            history.append(("assistant", "".join(reply)))
            print("\n" + summary_line(generation.stats), file=sys.stderr)
    finally:
        session.close()
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    handlers = {"generate": cmd_generate, "check-pair": cmd_check_pair, "chat": cmd_chat}
    try:
        if args.self_test or args.command in ("generate", "chat", "bench"):
            ensure_llama_runs()
        if args.self_test:
            from app.selftest import run_self_test

            return run_self_test(args)
        if args.command == "bench":
            from app import bench

            return bench.cmd_bench(args)
        if args.command in handlers:
            return handlers[args.command](args)
        from app.gui import launch

        return launch(args)
    except UsageError as exc:
        print(f"tandem: error: {exc}", file=sys.stderr)
        return 2
    except TandemError as exc:  # the input was fine; something failed while running
        logging.getLogger("tandem").error("%s", exc, extra=FILE_ONLY)
        print(f"tandem: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _configure_logging(verbose: bool) -> None:
    from app import __version__
    from app.logs import setup_logging

    setup_logging(verbose)
    logging.getLogger("tandem").info("tandem %s started", __version__)


def ensure_llama_runs() -> None:
    """Refuse, in one line with the rebuild command, a llama.cpp build that dies here."""
    from app.backends.build_check import check_llama_build

    check = check_llama_build()
    if not check.ok:
        logging.getLogger("tandem").error("%s Rebuild: %s", check.message, check.rebuild, extra=FILE_ONLY)
    check.raise_if_broken()
