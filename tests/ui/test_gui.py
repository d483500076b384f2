"""Start-up helpers: command-line overrides and the no-display fallback."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli import build_parser
from app.gui import has_display, settings_overrides


def test_only_options_given_on_the_command_line_override_settings(tmp_path):
    model = tmp_path / "target.gguf"
    args = build_parser().parse_args(["--target", str(model), "--n-ctx", "2048"])
    assert settings_overrides(args) == {"target_path": str(model.resolve()), "n_ctx": 2048}
    assert settings_overrides(build_parser().parse_args([])) == {}


def test_gpu_layers_override_applies_to_both_models():
    args = argparse.Namespace(target=None, draft=Path("d.gguf"), drafter="lookup", n_ctx=4096, threads=4,
                              gpu_layers=0)
    overrides = settings_overrides(args)
    assert overrides["target_gpu_layers"] == overrides["draft_gpu_layers"] == 0
    assert overrides["drafter"] == "lookup" and overrides["n_threads"] == 4
    assert overrides["draft_path"].endswith("d.gguf")


def test_no_display_is_detected_on_linux(monkeypatch):
    monkeypatch.setattr("sys.platform", "linux")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    assert not has_display()
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert has_display()
