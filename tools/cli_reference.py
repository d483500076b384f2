"""The option tables of docs/cli.md, written from the real argument parsers.

    python tools/cli_reference.py            # print the tables
    python tools/cli_reference.py --write    # put them into docs/cli.md, between the markers
    python tools/cli_reference.py --check    # exit 1 when docs/cli.md differs (tests/test_docs.py does this)

Each row is an option as ``tandem COMMAND --help`` shows it: its names and its help text,
defaults filled in by argparse from the values the parser really uses. A command's model
options are accepted before the command too (``tandem -m T chat``); their defaults are
the top-level parser's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLI_DOC = ROOT / "docs" / "cli.md"
BEGIN = "<!-- BEGIN options: written by tools/cli_reference.py from the parsers; do not edit by hand -->"
END = "<!-- END options -->"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = parser._get_formatter()._expand_help(action) if action.help else ""
    return " ".join(text.split()).replace("|", "\\|")


def _names(action: argparse.Action) -> tuple[str, str]:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`", ""
    long = [o for o in action.option_strings if o.startswith("--")]
    first = long[0] if long else action.option_strings[0]
    if action.nargs == 0:
        value = ""
    elif action.choices and not action.metavar:
        value = " {" + ",".join(map(str, action.choices)) + "}"
    else:
        value = f" {action.metavar or action.dest.upper()}"
    aliases = ", ".join(f"`{o}`" for o in action.option_strings if o != first)
    return f"`{first}{value}`".replace("|", "\\|"), aliases


SHARED = {"models (default: the demo pair)": "model options", "decoding": "decoding options"}


def _rows(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(group title, table row) for each option the command's --help shows."""
    rows = []
    for group in parser._action_groups:
        for action in group._group_actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
                continue
            name, aliases = _names(action)
            rows.append((group.title, f"| {name} | {aliases} | {_help(parser, action) or '—'} |"))
    return rows


HEAD = ["| option | also | what it does (default) |", "|---|---|---|"]


def reference() -> str:
    from app.cli.main import build_parser

    parser = build_parser()
    commands = _subparsers(parser)
    # The model and decoding options read the same in every command that has them: one table
    # each, from ``generate``; a command where one reads otherwise lists that one itself.
    shared = {title: [row for t, row in _rows(commands["generate"]) if t == title] for title in SHARED}
    lines = [BEGIN, ""]
    for title, name in SHARED.items():
        lines += [f"### The {name}", ""]
        lines += ["Every command that loads models takes these" + (
            " (before the command too: `tandem -m T.gguf chat`)." if title.startswith("models") else
            " (`generate`, `chat`, `serve`; `bench` has its own)."), ""]
        lines += HEAD + shared[title] + [""]
    lines += ["### `tandem` (no command: the window)", ""]
    lines += HEAD + [row for title, row in _rows(parser) if title not in SHARED]
    lines += ["", "and the model options."]
    for name, sub in commands.items():
        lines += ["", f"### `tandem {name}`", ""]
        if sub.description:
            lines += [" ".join(sub.description.split()), ""]
        rows = _rows(sub)
        own = [row for title, row in rows if title not in SHARED or row not in shared[title]]
        lines += HEAD + own
        also = [SHARED[t] for t in SHARED if any(title == t for title, _ in rows)]
        if also:
            lines += ["", "and the " + " and the ".join(also) + (
                " (those listed above read as listed here)." if len(own) > sum(t not in SHARED for t, _ in rows) else ".")]
    lines += ["", END]
    return "\n".join(lines)


def current(doc: str) -> str | None:
    if BEGIN not in doc or END not in doc:
        return None
    return doc[doc.index(BEGIN):doc.index(END) + len(END)]


def main(argv: list[str]) -> int:
    generated = reference()
    if "--write" in argv:
        doc = CLI_DOC.read_text(encoding="utf-8")
        old = current(doc)
        if old is None:
            raise SystemExit(f"{CLI_DOC} has no {BEGIN!r} ... {END!r} block to fill")
        CLI_DOC.write_text(doc.replace(old, generated), encoding="utf-8")
        return 0
    if "--check" in argv:
        if current(CLI_DOC.read_text(encoding="utf-8")) != generated:
            print(f"{CLI_DOC} differs from the parsers: run python tools/cli_reference.py --write", file=sys.stderr)
            return 1
        return 0
    print(generated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
