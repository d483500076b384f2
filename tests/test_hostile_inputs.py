"""Hostile templates, settings, histories and exports end to end (tests/hostile_inputs.py):
through the real CLI and the real window start, in child processes with a time limit.
Each ends cleanly: an answer with a one-line warning, or a start with a notice, or a
one-line refusal; never a traceback, a signal or a hang."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile_inputs import EXPORTS, HISTORIES, MARKDOWN_TEXTS, SETTINGS, TEMPLATES, write_template_model
from hostile_models import write_model

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 30  # the bound for every hostile input


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One TANDEM_HOME for the CLI runs: the build probe runs once for the module."""
    return tmp_path_factory.mktemp("tandem-home")


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("honest") / "honest.gguf")


def run(args: list[str], home: Path, timeout: float, **env_changes) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(home), **env_changes)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, errors="replace",
                            timeout=timeout, env=env, cwd=ROOT)
    return result, time.perf_counter() - started


def clean(result: subprocess.CompletedProcess) -> None:
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def test_the_cli_runs_the_honest_model(home, honest):
    result, _ = run(["-m", "app", "generate", "--target", str(honest), "--prompt", "hi", "--max-tokens", "2",
                     "--no-speculation"], home, timeout=120)  # the first run also probes llama.cpp's build
    clean(result)


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_hostile_template_still_answers_with_one_warning(home, honest, tmp_path, name):
    model = write_template_model(tmp_path / f"{name}.gguf", TEMPLATES[name])
    result, seconds = run(["-m", "app", "generate", "--target", str(model), "--prompt", "hi", "--max-tokens", "2",
                           "--no-speculation"], home, timeout=LIMIT_S)
    clean(result)
    warnings = [line for line in result.stderr.splitlines() if "chat template" in line]
    assert len(warnings) == 1, result.stderr
    # One that cannot compile is judged at load, one that fails as it renders at each reply:
    # either way one line naming the file, and the built-in format that stood in.
    assert warnings[0].startswith(f"tandem: {name}.gguf: ") or f"{name}.gguf: the chat template " in warnings[0]
    assert "llama.cpp's 'chatml' format" in warnings[0]
    assert seconds < LIMIT_S


# Starts the window as `tandem` does, waits for the load, prints what it says, closes.
START_SCRIPT = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.cli.main import build_parser
from app.cli.gui import launch

app = QApplication(sys.argv[:1])

def report_when_loaded():
    for widget in QApplication.topLevelWidgets():
        client = getattr(widget, "client", None)
        if client is not None and not client.loading:
            print("STARTED", "loaded" if client.info is not None else "not loaded", flush=True)
            for text in widget.notices.texts():
                print("NOTICE", " ".join(text.split()), flush=True)
            print("MESSAGES", len(widget.chat_view.messages()), flush=True)
            widget.close()
            return
    QTimer.singleShot(50, report_when_loaded)

QTimer.singleShot(50, report_when_loaded)
sys.exit(launch(build_parser().parse_args(sys.argv[1:])))
"""


def start_window(home: Path, model: Path) -> tuple[list[str], float]:
    result, seconds = run(["-c", START_SCRIPT, "--target", str(model), "--n-ctx", "256"], home, timeout=LIMIT_S + 30,
                          QT_QPA_PLATFORM="offscreen")
    clean(result)
    lines = result.stdout.splitlines()
    assert any(line.startswith("STARTED loaded") for line in lines), result.stdout + result.stderr[-2000:]
    return lines, seconds


def fresh_home(tmp_path: Path, shared: Path) -> Path:
    """A home of its own with the module's cached build probe (it costs seconds)."""
    home = tmp_path / "home"
    if (shared / "cache").exists():
        import shutil

        shutil.copytree(shared / "cache", home / "cache")
    return home


@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_window_starts_over_a_hostile_settings_file(home, honest, tmp_path, name):
    own = fresh_home(tmp_path, home)
    config = own / "config"
    config.mkdir(parents=True)
    SETTINGS[name](config / "settings.json")
    lines, seconds = start_window(own, honest)
    notices = [line for line in lines if line.startswith("NOTICE ")]
    assert any("settings" in line.lower() for line in notices), lines
    assert list(config.glob("settings.json.bad-*")), "the original is kept aside"
    assert seconds < LIMIT_S + 30


@pytest.mark.parametrize("name", list(HISTORIES))
def test_the_window_starts_twice_over_a_damaged_history(home, honest, tmp_path, name):
    own = fresh_home(tmp_path, home)
    (own / "data").mkdir(parents=True)
    HISTORIES[name](own / "data" / "history.sqlite3")
    for _ in range(2):  # a restore that failed once used to fail every start
        lines, _ = start_window(own, honest)
        assert "MESSAGES 2" in lines, lines  # the damaged chat, shown as far as it can be


@pytest.mark.parametrize("name", list(EXPORTS))
def test_a_hostile_export_is_refused_naming_the_bad_field(tmp_path, name):
    from app.storage.errors import ImportRefused
    from app.storage.export import read_export

    text, named = EXPORTS[name]
    path = tmp_path / f"{name}.json"
    path.write_text(text, encoding="utf-8")
    started = time.perf_counter()
    with pytest.raises(ImportRefused, match=named.replace("[", r"\[").replace("]", r"\]")):
        read_export(path)
    assert time.perf_counter() - started < LIMIT_S


def test_markdown_texts_stay_text():
    from markdown_it import MarkdownIt

    from app.storage.export import to_markdown
    from app.storage.history import ConversationSummary, StoredMessage

    messages = [StoredMessage(i, 1, "user" if i % 2 == 0 else "assistant", text)
                for i, text in enumerate(MARKDOWN_TEXTS)]
    html = MarkdownIt("commonmark", {"html": True}).render(
        to_markdown(ConversationSummary(1, "<b>title</b>", 0.0, 0.0), messages))
    assert html.count("<h2>") == len(messages) and "<script" not in html and "<img" not in html
    assert "<b>" not in html
