"""``tandem``: parse the command line and hand it to the window or a command.

Every expected failure is a ``TandemError`` and ends as one line on stderr with a
non-zero exit code (1: it failed while running; 2: the command line was wrong),
never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

from app.terminal.arg_types import regular_file, utf8_text
from app.errors import TandemError
from app.logs import FILE_ONLY
from app.terminal.shared import UsageError, add_model_arguments, add_sampling_arguments, ensure_llama_runs


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (with where to find help), exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(2, f"tandem: error: {message} (see {self.prog} --help)\n")

    def _get_option_tuples(self, option_string: str):
        # llama.cpp's multi-letter single-dash names (-ngl, -md) make "-n" or "-m" look like
        # abbreviations of them, even with allow_abbrev off; keep exact names only ("-n7"
        # is still -n with 7).
        return [t for t in super()._get_option_tuples(option_string) if t[1] in (option_string, option_string[:2])]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tandem", allow_abbrev=False, description=(
        "Chat with a local GGUF model, sped up losslessly by a draft model. "
        "Without a command the chat window opens."))
    parser.add_argument("--version", action="version", version=version_text())
    parser.add_argument("--self-test", action="store_true",
                        help="check that speculation works on this machine, then exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log llama.cpp's messages")
    add_model_arguments(parser, in_command=False)
    subcommands = parser.add_subparsers(dest="command")

    gen = subcommands.add_parser("generate", help="generate text for one prompt or a file of prompts")
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", "-p", type=utf8_text, metavar="TEXT", help="the prompt text")
    source.add_argument("--prompts", type=regular_file, metavar="JSONL", help='JSONL file of {"prompt": ..., "seed": ...} lines')
    add_model_arguments(gen)
    add_sampling_arguments(gen)
    gen.add_argument("--raw", action="store_true", help="send the prompt as is, not as a chat message")
    gen.add_argument("--system", type=utf8_text, default="", help="system prompt for chat mode (default: none)")
    gen.add_argument("--json", action="store_true", help="one JSON object per prompt")

    check = subcommands.add_parser("check-pair", help="can DRAFT speculate for TARGET, token for token or through text? (exit 0 yes; 1: a file "
                                        "llama.cpp cannot run)")
    check.add_argument("target_path", type=Path, metavar="TARGET", help="the target GGUF")
    check.add_argument("draft_path", type=Path, metavar="DRAFT", help="the draft GGUF")
    check.add_argument("--json", action="store_true", help="one JSON object: compatible, the rule that failed")

    chat = subcommands.add_parser("chat", help="chat in the terminal")
    add_model_arguments(chat)
    add_sampling_arguments(chat)
    chat.add_argument("--system", type=utf8_text, default="", help="system prompt (default: none)")

    from app.cli import draft_command  # make-draft defines its own options
    draft_command.add_parser(subcommands)
    from app.bench import speedup as bench  # the bench command defines its own options
    bench.add_parser(subcommands, add_model_arguments)
    from app.cli import serve_command as serve  # the serve command defines its own options
    serve.add_parser(subcommands, add_model_arguments, add_sampling_arguments)
    from app.cli import worker_command  # the worker command defines its own options
    worker_command.add_parser(subcommands)
    from app.cli import fit_command  # the fit command defines its own options
    fit_command.add_parser(subcommands)
    from app.cli import hub_command  # search and pull define their own options
    hub_command.add_parsers(subcommands)
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
def run(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        command = args.command
        if command is None and not args.self_test:
            from app.cli.gui import has_display

            if has_display():
                from app.cli.gui import launch

                return launch(args)
            # No display (an SSH session): the terminal chat, with chat's own defaults.
            print("tandem: no display found; starting the terminal chat instead", file=sys.stderr)
            args = parser.parse_args([*argv, "chat"])
            command = "chat"
        if command == "fit":  # headers and free memory only: nothing loads
            from app.cli.fit_command import cmd_fit

            return cmd_fit(args)
        if command in ("search", "pull"):  # the Hub and headers: nothing loads
            from app.cli import hub_command

            return {"search": hub_command.cmd_search, "pull": hub_command.cmd_pull}[command](args)
        ensure_llama_runs()  # everything below loads models
        if args.self_test:
            from app.cli.selftest import run_self_test

            return run_self_test(args)
        if command == "bench":
            from app.bench import speedup as bench

            return bench.cmd_bench(args)
        if command == "make-draft":
            from app.cli.draft_command import cmd_make_draft

            return cmd_make_draft(args)
        if command == "serve":
            from app.cli.serve_command import cmd_serve

            return cmd_serve(args)
        if command == "worker":
            from app.cli.worker_command import cmd_worker

            return cmd_worker(args)
        from app.cli import commands

        return {"generate": commands.cmd_generate, "chat": commands.cmd_chat,
                "check-pair": commands.cmd_check_pair}[command](args)
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
