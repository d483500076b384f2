"""The chat format chosen per model file: kept in the settings, checked, read without
side effects by the terminal, and set from the window's command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from app.cli.gui import chat_format_override
from app.storage.errors import InvalidSettingError
from app.storage.settings import (MAX_CHAT_FORMATS, Settings, chat_format_for, load_settings,
                                  remembered_chat_format, save_settings, with_chat_format)
from app.terminal.shared import UsageError


def test_formats_are_kept_per_file_and_round_trip(tmp_path):
    settings = with_chat_format(with_chat_format(Settings(), "/m/a.gguf", "gemma"), "/m/b.gguf", "llama3")
    settings = with_chat_format(settings, "/m/a.gguf", "mistral-v7-tekken")  # a new choice replaces, goes last
    assert settings.chat_formats == (("/m/b.gguf", "llama3"), ("/m/a.gguf", "mistral-v7-tekken"))
    assert chat_format_for(settings, "/m/a.gguf") == "mistral-v7-tekken" and chat_format_for(settings, "/x") == ""
    assert with_chat_format(settings, "/m/b.gguf", "").chat_formats == (("/m/a.gguf", "mistral-v7-tekken"),)
    path = tmp_path / "settings.json"
    save_settings(settings, path)
    assert load_settings(path) == (settings, None)
    assert remembered_chat_format("/m/b.gguf", path) == "llama3"


def test_the_newest_choices_are_kept_when_there_are_too_many():
    settings = Settings()
    for i in range(MAX_CHAT_FORMATS + 3):
        settings = with_chat_format(settings, f"/m/{i}.gguf", "chatml")
    assert len(settings.chat_formats) == MAX_CHAT_FORMATS
    assert settings.chat_formats[0][0] == "/m/3.gguf"


@pytest.mark.parametrize("value", [[["/m/a.gguf", "bad name!"]], [["/m/a.gguf"]], "gemma", [["/m/a.gguf", 3]],
                                   [["/m/a.gguf", "x" * 65]]])
def test_a_bad_entry_is_refused(value):
    with pytest.raises(InvalidSettingError, match="chat_formats"):
        Settings(chat_formats=value)


def test_the_terminal_reads_the_file_without_touching_it(tmp_path):
    path = tmp_path / "settings.json"
    assert remembered_chat_format("/m/a.gguf", path) == ""  # no file
    bad = '{"version": 1, "settings": {"chat_formats": [["/m/a.gguf", "bad name!"]], "top_k": "x"}}'
    path.write_text(bad)
    assert remembered_chat_format("/m/a.gguf", path) == ""
    path.write_text(json.dumps({"version": 1, "settings": {"chat_formats": [["/m/a.gguf", "zephyr"]],
                                                           "top_k": "not a number"}}))
    before = path.read_text()
    assert remembered_chat_format("/m/a.gguf", path) == "zephyr"  # another bad value does not matter here
    assert path.read_text() == before and list(tmp_path.iterdir()) == [path]  # nothing moved aside


def test_the_window_takes_chat_format_from_its_command_line(tmp_path):
    target = tmp_path / "m.gguf"
    args = argparse.Namespace(target=target, chat_format="gemma")
    override = chat_format_override(args, Settings(chat_formats=(("/other.gguf", "llama3"),)))
    assert override == {"chat_formats": (("/other.gguf", "llama3"), (str(target.resolve()), "gemma"))}
    assert chat_format_override(argparse.Namespace(target=None, chat_format=None), Settings()) == {}
    with pytest.raises(UsageError, match="not one of llama.cpp's chat formats"):
        chat_format_override(argparse.Namespace(target=None, chat_format="nope"), Settings())
    assert chat_format_override(argparse.Namespace(target=Path("/m.gguf"), chat_format="file"),
                                Settings(chat_formats=(("/m.gguf", "gemma"),))) == {"chat_formats": ()}
