"""Every method the engine has can be asked for: token trees (a setting of their own,
auto/on/off, in the window, on the command line and in a request's ``tandem`` object)
and lookahead (a drafter the window offers too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.engine.types import DrafterKind
from app.server.requests import Defaults, chat_job
from app.session.config import ModelSpec, spec_config
from app.storage.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def _generate(*args: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "app", "generate", "--json", "--temperature", "0",
                             "--max-tokens", "48", "--prompt", "Write a list of ten fruits, one per line.", *args],
                            capture_output=True, text=True, timeout=600, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_trees_on_make_tree_rounds_and_the_same_text(demo_models):
    """The exact pair of the losslessness tests (Q4_1 target, Q4_0 draft): trees on verify
    second guesses, and the reply is the target's own."""
    pair = ("--target", str(demo_models.draft), "--draft", str(demo_models.strict_draft), "--draft-max", "6")
    plain = _generate(*pair, "--no-speculation")
    on = _generate(*pair, "--tree", "on")
    off = _generate(*pair, "--tree", "off")
    assert on["stats"]["tree_rounds"] > 0 and off["stats"]["tree_rounds"] == 0
    assert on["text"] == off["text"] == plain["text"]


def test_the_tree_setting_reaches_every_front_end():
    assert spec_config(Settings(tree="on")).tree == "on" and spec_config(Settings()).tree == "auto"
    body = {"model": "any", "messages": [{"role": "user", "content": "hi"}], "tandem": {"tree": "off"}}
    assert chat_job(body, Defaults()).spec.tree == "off"
    from app.cli.main import build_parser

    assert build_parser().parse_args(["chat", "--tree", "on"]).tree == "on"


def test_the_window_offers_lookahead_and_trees(qtbot):
    from app.ui.settings_dialog import SettingsDialog

    dialog = SettingsDialog(Settings(drafter="lookahead", tree="off"))
    qtbot.addWidget(dialog)
    assert dialog.settings().drafter == "lookahead" and dialog.settings().tree == "off"
    assert "needs no draft model" in dialog.compat_label.text()
    assert ModelSpec.from_settings(dialog.settings()).drafter is DrafterKind.LOOKAHEAD
