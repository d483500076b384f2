"""No crash loop: a start that died while loading models does not load them again.

A real engine process dies in the middle of a load (its loader aborts, standing in
for whatever llama.cpp might still die of past the trial load); the next window
start in this test sees the mark that process left, does not load those models,
says why and opens the settings, and loads them only when asked to.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from app.session import protocol as p
from app.session.config import ModelSpec
from app.session.engine_session import EngineDied, EngineSession
from app.storage import load_marker
from app.storage.settings import Settings

from window_fixtures import wait_loaded
from bridge.fakes import ScriptedLoader

SETTINGS = Settings(target_path="/models/killer.gguf", draft_path="/models/killer-draft.gguf")


def die_while_loading(tandem_home: Path, settings: Settings) -> str:
    """A real engine process, its loader aborting mid-load (the engine's test hook); the
    line its death was reported with."""
    loader = tandem_home / "dying_loader.py"
    loader.parent.mkdir(parents=True, exist_ok=True)
    loader.write_text(textwrap.dedent("""
        import os

        def load(spec, progress):
            progress("Loading target model", 0.3)
            os.abort()  # what a GGML_ASSERT does
    """))
    env = dict(os.environ, TANDEM_HOME=str(tandem_home), **{p.TEST_HOOKS: "1", p.TEST_LOADER: f"{loader}:load"})
    engine = EngineSession(env=env)
    try:
        with pytest.raises(EngineDied) as died:
            engine.load(ModelSpec(target_path=settings.target_path, draft_path=settings.draft_path))
    finally:
        engine.close()
    return str(died.value)


def test_the_next_start_does_not_load_what_killed_the_last(make_window, qtbot, tandem_home):
    die_while_loading(tandem_home, SETTINGS)
    loader = ScriptedLoader()
    window = make_window(SETTINGS, loader=loader)

    qtbot.waitUntil(lambda: window._settings_dialog is not None, timeout=10_000)
    notice = window.notices.notice("load")
    assert notice is not None and notice.isVisible()
    assert notice.text().startswith("Tandem closed while loading killer.gguf and killer-draft.gguf")
    assert "not loaded again" in notice.text()
    assert loader.specs == []  # nothing was loaded
    assert not window.client.loading and window.model_label.text() == "No model loaded"

    # OK in the settings is the user's "try again": the load runs, and its mark goes.
    window._settings_dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    wait_loaded(qtbot, window)
    assert [spec.target_path for spec in loader.specs] == [SETTINGS.target_path]
    assert load_marker.crashed_load() is None
    assert window.notices.notice("load") is None


def test_the_guard_holds_across_starts_until_a_load_is_asked_for(make_window, qtbot, tandem_home):
    die_while_loading(tandem_home, SETTINGS)
    for _ in range(2):  # closing without choosing leaves the guard in place
        loader = ScriptedLoader()
        window = make_window(SETTINGS, loader=loader)
        qtbot.waitUntil(lambda: window._settings_dialog is not None, timeout=10_000)
        window._settings_dialog.reject()
        window.close()
        assert loader.specs == []
    assert load_marker.crashed_load() is not None


def test_other_models_load_as_usual(make_window, qtbot, tandem_home):
    die_while_loading(tandem_home, SETTINGS)
    loader = ScriptedLoader()
    window = make_window(SETTINGS.replace(target_path="/models/other.gguf"), loader=loader)
    wait_loaded(qtbot, window)
    assert window.notices.notice("load") is None and window._settings_dialog is None
    assert load_marker.crashed_load() is None  # the new load forgot the old death


def test_a_load_that_ends_leaves_no_mark(make_window, qtbot, tandem_home):
    from app.engine.errors import ModelFileError

    for loader in (ScriptedLoader(), ScriptedLoader(load_error=ModelFileError("x.gguf: bad"))):
        window = make_window(SETTINGS, loader=loader)
        qtbot.waitUntil(lambda: not window.client.loading, timeout=10_000)
        assert load_marker.crashed_load() is None
        assert not list((tandem_home / "data").glob("loading-*.json"))
