"""System-prompt presets, library folders and recent pairs in the settings: validated
like every setting, saved and loaded, and a bad value resets only itself."""

from __future__ import annotations

import json
import re
import os

import pytest

from app.storage import paths
from app.storage.errors import InvalidSettingError
from app.storage.settings import (MAX_FOLDERS, MAX_PATH_CHARS, MAX_PRESETS, MAX_RECENT_PAIRS, MAX_TEXT_CHARS,
                                  Settings, load_settings, preset_text, save_settings, with_recent_pair)


def test_presets_folders_and_pairs_round_trip():
    chosen = Settings(system_prompt_presets=[["Terse", "Answer in one line."], ["Pirate 🏴‍☠️", "Arr."]],
                      library_folders=["/models", "/mnt/big disk/gguf"],
                      recent_pairs=[["/m/t.gguf", "/m/d.gguf"]])
    assert chosen.system_prompt_presets == (("Terse", "Answer in one line."), ("Pirate 🏴‍☠️", "Arr."))
    save_settings(chosen)
    loaded = load_settings()
    assert loaded.notice is None and loaded.settings == chosen
    assert preset_text(loaded.settings, "Terse") == "Answer in one line." and preset_text(chosen, "nope") is None


def test_recent_pairs_newest_first_each_once():
    settings = Settings()
    for i in range(MAX_RECENT_PAIRS + 3):
        settings = with_recent_pair(settings, f"t{i}", f"d{i}")
    settings = with_recent_pair(settings, "t5", "d5")
    assert settings.recent_pairs[0] == ("t5", "d5") and len(settings.recent_pairs) == MAX_RECENT_PAIRS
    assert settings.recent_pairs.count(("t5", "d5")) == 1


@pytest.mark.parametrize("value, words", [
    ("Terse", "list of [name, text] pairs"),
    ([["only a name"]], "list of [name, text] pairs"),
    ([["", "text"]], "names of 1 to"),
    ([["  ", "text"]], "names of 1 to"),
    ([["a", "x"], ["A", "y"]], "must not name two presets"),
    ([[f"p{i}", ""] for i in range(MAX_PRESETS + 1)], f"at most {MAX_PRESETS} presets"),
    ([["a", "x" * MAX_TEXT_CHARS], ["b", "y"]], "characters of prompts in all"),
    ([["a", 5]], "must be text"),
    ([["a", "\ud800"]], "lone surrogates"),
])
def test_bad_presets_are_refused_in_one_line(value, words):
    with pytest.raises(InvalidSettingError, match=re.escape(words)):
        Settings(system_prompt_presets=value)


def test_bad_folders_and_pairs_are_refused():
    with pytest.raises(InvalidSettingError, match=f"at most {MAX_FOLDERS} entries"):
        Settings(library_folders=["/x"] * (MAX_FOLDERS + 1))
    with pytest.raises(InvalidSettingError, match=r"\[path, path\]"):
        Settings(recent_pairs=[["/only-one"]])
    with pytest.raises(InvalidSettingError, match="must be a list"):
        Settings(library_folders="/models")


def test_a_bad_preset_in_the_file_resets_only_the_presets():
    path = paths.settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "settings": {
        "system_prompt_presets": [["x", "a"], ["X", "b"]], "library_folders": ["/models"], "temperature": 0.5}}))
    loaded = load_settings()
    assert loaded.settings.system_prompt_presets == () and loaded.settings.library_folders == ("/models",)
    assert loaded.settings.temperature == 0.5
    assert "system_prompt_presets" in loaded.notice and "\n" not in loaded.notice


def test_the_largest_valid_settings_still_save_and_load():
    wide = os.fsdecode(b"\xff") * MAX_PATH_CHARS  # six bytes each as a JSON escape
    longest = Settings(system_prompt="\x01" * MAX_TEXT_CHARS, window_geometry="\x02" * MAX_TEXT_CHARS,
                       target_path=wide, draft_path=wide,
                       system_prompt_presets=[[f"{i:02d}" + "n" * 78, "\x03" * (MAX_TEXT_CHARS // MAX_PRESETS)]
                                              for i in range(MAX_PRESETS)],
                       library_folders=[wide] * MAX_FOLDERS, recent_pairs=[[wide, wide]] * MAX_RECENT_PAIRS)
    save_settings(longest)
    loaded = load_settings()
    assert loaded.notice is None and loaded.settings == longest
