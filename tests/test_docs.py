"""The user docs stay honest: every ``tandem ...`` command line in README.md and docs/ parses
with the real parser, every relative link resolves, the README stays a landing page, the
option tables of docs/cli.md are the parsers', and no history or stray commit hash is left in
the prose. Cheap (no model is loaded), so it runs with every test run.

An example of a command line the parser refuses on purpose is marked with a comment that
contains ``error:`` (``tandem generate --draft-max 65   # error: out of range``).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import cli_reference  # noqa: E402

README = ROOT / "README.md"
README_MAX_LINES = 220
USER_DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
# Docs being written alongside this test; drop each entry once its file has landed.
PENDING_DOCS: set[str] = set()  # docs another change adds, while it is on its way (none now)

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`(tandem [^`]+)`(?!`)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
COMMAND = re.compile(r"^(?:\$ )?(?:\S*/)?(tandem(?:-window)?)(?=\s|$)(.*)$")
HISTORY = re.compile(r"\b(this|last|the last|previous) round\b", re.I)
# A commit: "commit" and its hash, or 7 to 40 hex digits with a letter and a digit among them.
HASH = re.compile(r"\bcommit [0-9a-f]{7,40}\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def prose(text: str) -> str:
    """The text without fenced blocks, whose lines are commands and program output."""
    return FENCE.sub("", text)


def command_lines(text: str) -> list[str]:
    """Every ``tandem ...`` line of the fenced blocks, joined over trailing backslashes."""
    found = []
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            if COMMAND.match(line.strip()):
                found.append(line.strip())
    return found


def unknown_options(span: str) -> list[str]:
    """The options of an inline ``tandem COMMAND --option ...`` that COMMAND does not have
    (an inline span names a command and options; it need not be a whole command line)."""
    from app.cli.main import build_parser

    parser = build_parser()
    commands = cli_reference._subparsers(parser)
    words = span.split()[1:]
    command = commands.get(words[0]) if words else None
    known = set(parser._option_string_actions) | (set(command._option_string_actions) if command else set())
    if words and not words[0].startswith("-") and command is None:
        return [words[0]]
    return [w.split("=")[0] for w in words if w.startswith("-") and w.split("=")[0] not in known]


def parse(line: str) -> tuple[bool, str]:
    """(parsed, the parser's message) for one command line, its comment set aside. A file
    the line names for the reader's own (``--prompts prompts.jsonl``) need not exist here."""
    from app.cli.main import build_parser

    words = shlex.split(line, comments=True)
    words = words[1:] if words[0] == "$" else words
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(words[1:])
    except SystemExit as exc:
        message = said.getvalue().strip()
        return exc.code in (0, None) or "No such file or directory" in message, message
    return True, ""


def headings(text: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    anchors = set()
    for title in re.findall(r"^#+\s+(.*?)\s*$", prose(text), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.lower().replace("`", "")).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("doc", USER_DOCS, ids=relative)
def test_every_command_line_parses(doc, capsys):
    refused = []
    for line in command_lines(doc.read_text(encoding="utf-8")):
        ok, message = parse(line)
        meant_as_error = "error:" in line.partition("#")[2]
        if ok == meant_as_error:
            refused.append(f"{line}  ({'parsed, but marked as an error' if ok else message})")
    capsys.readouterr()  # the parser's own messages
    for span in INLINE.findall(prose(doc.read_text(encoding="utf-8"))):
        if unknown_options(span):
            refused.append(f"`{span}`  (no such command or option: {', '.join(unknown_options(span))})")
    assert not refused, f"{relative(doc)}: " + "; ".join(refused)


@pytest.mark.parametrize("doc", USER_DOCS, ids=relative)
def test_every_relative_link_resolves(doc):
    text = doc.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(prose(text)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if relative(file) in PENDING_DOCS if file.is_relative_to(ROOT) else False:
            continue
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in headings(file.read_text(encoding="utf-8")):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{relative(doc)}: " + ", ".join(broken)


def test_the_readme_stays_a_landing_page():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; reference material goes in docs/"


ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
ARCHITECTURE_MAX_LINES = 300
APP_PATH = re.compile(r"(?<![\w./])app/[\w./-]*[\w/]")

def app_paths(text: str) -> set[str]:
    """Every ``app/...`` path a text names (files and folders, checked exactly)."""
    return {path.rstrip(".") for path in APP_PATH.findall(text)}


def test_the_architecture_stays_an_overview():
    """The layers, the round and one token's walk; per-module detail goes in the module's
    docstring, which ARCHITECTURE.md names by its path."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= ARCHITECTURE_MAX_LINES, \
        f"docs/ARCHITECTURE.md has {lines} lines; move detail into the docstrings of the modules it names"
    named = app_paths(text)
    assert named, "docs/ARCHITECTURE.md names no app/ path"
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {', '.join(missing)}"


@pytest.mark.parametrize("doc", USER_DOCS, ids=relative)
def test_no_history_in_the_user_docs(doc):
    """History goes in CHANGELOG.md. A date or a commit appears only in a measurement's stamp,
    the one line that names both (``2026-12-03, commit 6158230, 2-core AMD EPYC: ...``)."""
    text = prose(doc.read_text(encoding="utf-8"))
    assert not HISTORY.search(text), f"{relative(doc)}: {HISTORY.search(text).group(0)!r}"
    for number, line in enumerate(text.splitlines(), 1):
        if HASH.search(line) or DATE.search(line):
            assert HASH.search(line) and DATE.search(line), \
                f"{relative(doc)}: a date or commit outside a measurement's stamp: {line.strip()[:120]}"


def test_the_option_tables_are_the_parsers():
    assert cli_reference.CLI_DOC.is_file()
    assert cli_reference.current(cli_reference.CLI_DOC.read_text(encoding="utf-8")) == cli_reference.reference(), \
        "docs/cli.md's option tables differ from the parsers: run python tools/cli_reference.py --write"


def test_the_checks_can_fail(tmp_path):
    """What the tests above catch, shown on a bad doc."""
    assert not parse("tandem generate --draft-max 65")[0]
    assert not parse("tandem serve --no-such-option")[0]
    assert parse("tandem generate --prompts my-own-prompts.jsonl")[0]
    assert parse("tandem --version")[0] and parse("tandem bench --method self --limit 8")[0]
    bad = "```bash\ntandem chat --temprature 0.5\n```\nand `tandem bench --limit 2`, see [x](nowhere.md)\n"
    assert command_lines(bad) == ["tandem chat --temprature 0.5"]
    assert INLINE.findall(prose(bad)) == ["tandem bench --limit 2"] and not unknown_options("tandem bench --limit 2")
    assert unknown_options("tandem chat --temprature 0.5") == ["--temprature"] and unknown_options("tandem sever")
    assert LINK.findall(prose(bad)) == ["nowhere.md"]
    assert HISTORY.search("as measured this round") and HASH.search("on commit 6158230 it") and HASH.search("at 82dfeac") and not HASH.search("deadbeef")
    assert "the-round" in headings("## The round\n")
    assert app_paths("`app/engine/backend.py`, see app/window/. And `app/no_such.py`") == \
        {"app/engine/backend.py", "app/window/", "app/no_such.py"}
    assert not (ROOT / "app/no_such.py").exists() and not app_paths("webapp/x.py, app.session")


# -- constants the docs state ----------------------------------------------------------------
# Each (doc, pattern whose one group is a number the doc states, the code's value): the doc
# says what the code does, and a change of the constant fails here until the doc follows.
def _lookahead_positions() -> int:
    from app.engine.speculation.lookahead import NGRAM, WINDOW

    return WINDOW * (NGRAM - 1) - 1


def _constant(module: str, name: str):
    def read():
        import importlib

        value = importlib.import_module(module)
        for part in name.split("."):
            value = getattr(value, part)
        return value
    return read


def _default(setting: str):
    def read():
        from app.storage.settings import Settings

        return getattr(Settings(), setting)
    return read


STATED = [
    ("docs/speculative.md", r"(\d+) extra positions", _lookahead_positions),
    ("docs/speculative.md", r"judges it after (\d+) rounds", _constant("app.engine.speculation.lookahead",
                                                                      "LookaheadPolicy.WARMUP")),
    ("docs/speculative.md", r"drops it after (\d+)\s+verdicts", _constant("app.engine.speculation.lookahead",
                                                                         "LookaheadPolicy.OFF_AFTER")),
    ("docs/speculative.md", r"tries it again after (\d+) rounds", _constant("app.engine.speculation.lookahead",
                                                                           "LookaheadPolicy.PROBE_EVERY")),
    ("docs/speculative.md", r"up to ([\d,]+) rounds", _constant("app.engine.speculation.lookahead",
                                                               "LookaheadPolicy.PROBE_MOST")),
    ("docs/clients.md", r"reads a new prompt whole up to ([\d,]+) tokens", _constant("app.engine.speculation.drafters",
                                                                            "READ_WHOLE")),
    ("docs/clients.md", r"tail\s+it reads in ([\d.]+) s", _constant("app.engine.speculation.drafters", "READ_BUDGET_S")),
    ("docs/speculative.md", r"up to ([\d,]+) tokens, whatever the machine", _constant("app.engine.speculation.drafters",
                                                                                    "READ_WHOLE")),
    ("docs/clients.md", r"at least its\s+last (\d+) tokens", _constant("app.engine.speculation.drafters", "TAIL_LEAST")),
    ("docs/speculative.md", r"at least its\s+last (\d+) tokens", _constant("app.engine.speculation.drafters",
                                                                        "TAIL_LEAST")),
    ("docs/speculative.md", r"the tail it reads in ([\d.]+) s", _constant("app.engine.speculation.drafters",
                                                                         "READ_BUDGET_S")),
    ("docs/using.md", r"At most (\d+) chats", _constant("app.session.chat_states", "MAX_KEPT")),
    ("docs/using.md", r"chats and (\d+) GiB\s+are kept", lambda: _constant("app.session.chat_states", "BUDGET_BYTES")() >> 30),
    ("docs/using.md", r"less than (\d+) GiB of the disk", lambda: _constant("app.storage.paths", "DISK_RESERVE")() >> 30),
    ("docs/using.md", r"chats of at least (\d+) tokens", _constant("app.session.kept_states", "MIN_TOKENS_SAVED")),
    # A recurrent model's kept checkpoints (app/backends/llama/state_checkpoints.py).
    ("docs/recurrent-models.md", r"At most (\d+) kept checkpoints", _constant("app.engine.gguf.memory_estimate",
                                                                          "KEPT_CHECKPOINTS_MOST")),
    ("docs/recurrent-models.md", r"at most (\d+) MB\s+of them", lambda: _constant(
        "app.engine.gguf.memory_estimate", "KEPT_CHECKPOINT_BYTES")() >> 20),
    # The served conversations kept in memory (app/server/prompt_cache.py).
    ("docs/clients.md", r"replaces at least (\d+) tokens", _constant("app.session.kept_states", "MIN_TOKENS_SAVED")),
    ("docs/clients.md", r"copied to memory \(at most (\d+) of them", _constant("app.server.prompt_cache", "MAX_KEPT")),
    ("docs/clients.md", r"of them, (\d+) GiB, each", lambda: _constant("app.server.prompt_cache", "BUDGET_BYTES")() >> 30),
    ("docs/using.md", r"\(at most (\d+) GiB\)", lambda: _constant("app.engine.gguf.memory_plan", "MARGIN_MOST")() >> 30),
    ("docs/using.md", r"a batch\s+of (\d+) tokens", _constant("app.engine.gguf.context_shape", "BATCH")),
    ("docs/using.md", r"(\d+) sequences for token trees", _constant("app.engine.gguf.context_shape", "TREE_BRANCHES")),
    ("docs/using.md", r"(\d+)\s+rollback snapshots", _constant("app.engine.gguf.memory_kinds", "RS_SNAPSHOTS_DEFAULT")),
    ("docs/cli.md", r"a prompt of (\d+) tokens or more", _constant("app.engine.gguf.context_shape", "READ_APART_MIN")),
    ("docs/using.md", r"a prompt of (\d+) tokens or more", _constant("app.engine.gguf.context_shape", "READ_APART_MIN")),
    ("docs/clients.md", r"a prompt of (\d+) tokens or more", _constant("app.engine.gguf.context_shape", "READ_APART_MIN")),
    # The setting's own help (the settings dialog shows it) states it too.
    ("app/storage/settings.py", r"a prompt of (\d+) tokens or more", _constant("app.engine.gguf.context_shape",
                                                                              "READ_APART_MIN")),
    ("docs/speculative.md", r"Every (\d+)th round auto drafts one token more", _constant(
        "app.engine.speculation.draft_policy", "EXPLORE_EVERY")),
    # A float MTP head's compact copies (app/backends/head_files.py).
    ("docs/speculative.md", r"at most (\d+) kept, the least recently used", _constant("app.backends.head_files",
                                                                                     "HEADS_KEPT")),
    ("docs/speculative.md", r"leave (\d+) GiB on the disk", lambda: _constant("app.storage.paths",
                                                                            "DISK_RESERVE")() / 2**30),
    ("docs/cli.md", r"replies of at most (\d+) tokens, context", _default("max_tokens")),
    ("docs/cli.md", r"tokens, context (\d+),", _default("n_ctx")),
]


def stated_numbers(text: str, pattern: str) -> list[str]:
    return re.findall(pattern, text)


@pytest.mark.parametrize(("doc", "pattern", "value"), STATED, ids=[f"{d}:{p}" for d, p, _ in STATED])
def test_every_stated_constant_is_the_codes(doc, pattern, value):
    found = stated_numbers((ROOT / doc).read_text(encoding="utf-8"), pattern)
    assert found, f"{doc} no longer says {pattern!r}: update STATED with what it says now"
    expected = value()
    for number in found:
        assert float(number.replace(",", "")) == expected, (doc, pattern, number, expected)


def test_a_drifted_constant_fails():
    text = "the target's batches carry a Jacobi window (5 columns × 3 levels, 15 extra positions)"
    assert stated_numbers(text, STATED[0][1]) == ["15"] and _lookahead_positions() != 15


def test_the_targets_docs_say_hand_out_layer_inputs_are_the_codes():
    """docs/speculative.md names some architectures an EAGLE-3 drafter can read: each must
    be one app.engine.gguf.draft_heads.LAYER_INPUT_ARCHITECTURES lets through."""
    from app.engine.gguf.draft_heads import LAYER_INPUT_ARCHITECTURES

    text = " ".join((ROOT / "docs/speculative.md").read_text(encoding="utf-8").split())
    named = re.search(r"layer inputs in this llama.cpp \(([^)]*) and a few more do\)", text)
    assert named, "docs/speculative.md no longer lists the architectures that hand out layer inputs"
    names = [n.strip() for n in named.group(1).split(",")]
    assert len(names) >= 5 and set(names) <= LAYER_INPUT_ARCHITECTURES, set(names) - LAYER_INPUT_ARCHITECTURES
