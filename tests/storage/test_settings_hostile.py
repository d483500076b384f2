"""A hostile settings file never stops the app: no exception, no blocking, and only the
values that are bad go back to their defaults (the original kept aside)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from app.storage import paths
from app.storage.errors import InvalidSettingError
from app.storage.safe_json import loads_lenient
from app.storage.settings import MAX_FILE_BYTES, Settings, load_settings, save_settings

GOOD = {"temperature": 0.25, "max_tokens": 77}


def write_raw(text: str) -> None:
    path = paths.settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def with_good_values(name: str, raw_json_value: str) -> str:
    """A settings document in which one setting's value is ``raw_json_value`` as written."""
    good = ", ".join(f'"{key}": {json.dumps(value)}' for key, value in GOOD.items())
    return f'{{"version": 1, "settings": {{{good}, "{name}": {raw_json_value}}}}}'


def load_within(seconds: float = 10.0):
    """load_settings on a thread: a load that blocks fails the test instead of hanging it."""
    result = []
    worker = threading.Thread(target=lambda: result.append(load_settings()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "load_settings blocked"
    return result[0]


def kept_aside() -> list:
    return sorted(paths.config_dir().glob("settings.json.bad-*"))


@pytest.mark.parametrize("name, value, reason", [
    ("system_prompt", "[" * 100_000 + "]" * 100_000, "nested more than"),
    ("seed", "9" * 5000, "a number of 5,000 characters"),
    ("temperature", "1" * 400 + ".5", "must be a number"),
    ("n_ctx", "1" + "0" * 399 + ".0", "must be a whole number"),
    ("n_ctx", str(2**40), "must be from 256 to 16777216"),
    ("seed", str(-5), "must be from -1"),
    ("system_prompt", '"evil \\ud800 half"', "lone surrogates"),
    ("target_path", '"/models/\\udfff.gguf"', "lone surrogates"),
    ("window_geometry", '{"a": ' * 50 + "1" + "}" * 50, "nested more than"),
    ("top_p", "NaN", "must be a number"),
])
def test_a_bad_value_resets_that_setting_alone_and_says_so(name, value, reason):
    write_raw(with_good_values(name, value))
    loaded = load_within()
    assert loaded.settings.temperature == GOOD["temperature"] or name == "temperature"
    assert loaded.settings.max_tokens == GOOD["max_tokens"]
    assert getattr(loaded.settings, name) == getattr(Settings(), name)
    assert loaded.notice is not None and name in loaded.notice and reason in loaded.notice
    assert "\n" not in loaded.notice and len(loaded.notice) < 600
    assert len(kept_aside()) == 1  # the original, as it was
    # What was kept is saved again, so the next start is quiet and keeps the good values.
    again = load_settings()
    assert again.notice is None and again.settings == loaded.settings


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "too big", "a folder", "deep as a whole",
                                  "huge integer as a whole", "not JSON"])
def test_an_unusable_file_gives_defaults_at_once(kind):
    path = paths.settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)  # reading a FIFO blocks until someone writes
    elif kind == "link to /dev/zero":
        os.symlink("/dev/zero", path)  # reading never ends
    elif kind == "too big":
        write_raw(with_good_values("system_prompt", json.dumps("x" * MAX_FILE_BYTES)))
    elif kind == "a folder":
        path.mkdir()
    elif kind == "deep as a whole":
        write_raw("[" * 100_000 + "]" * 100_000)
    elif kind == "huge integer as a whole":
        write_raw("9" * 5000)
    else:
        write_raw('{"version": 1, "settings": {')
    loaded = load_within()
    assert loaded.settings == Settings()
    assert loaded.notice is not None and "could not be used" in loaded.notice and "\n" not in loaded.notice
    assert len(kept_aside()) == 1 and not os.path.lexists(path)
    save_settings(Settings(temperature=0.5))  # and the next save makes a fresh file there
    assert load_settings().settings.temperature == 0.5


def test_text_with_a_lone_surrogate_is_no_setting():
    with pytest.raises(InvalidSettingError, match="lone surrogates"):
        Settings(system_prompt="half a pair: \ud83d")


def test_a_file_name_that_is_not_utf8_is_saved_and_read_back():
    name = os.fsdecode(b"/models/caf\xe9.gguf")  # Latin-1 bytes on a UTF-8 system
    save_settings(Settings(target_path=name, system_prompt="naïve ☕"))
    raw = paths.settings_file().read_bytes()
    raw.decode("utf-8")  # the file itself stays UTF-8
    loaded = load_settings()
    assert loaded.notice is None
    assert loaded.settings.target_path == name and os.fsencode(loaded.settings.target_path).endswith(b"\xe9.gguf")
    assert loaded.settings.system_prompt == "naïve ☕"


def test_the_lenient_parser_reads_what_json_reads():
    document = {"version": 1, "settings": {"a": [1, 2.5, -3e-2, {"b": None, "c": [True, False]}],
                                           "s": "quote \" slash \\ tab \t é ☕ \U0001F600", "e": [], "o": {}}}
    text = json.dumps(document, indent=2)
    assert loads_lenient(text) == json.loads(text) == document
    assert loads_lenient(json.dumps(document, ensure_ascii=False)) == document


def test_every_valid_setting_saves_to_a_file_that_loads_again():
    from app.storage.settings import MAX_TEXT_CHARS

    from app.storage.settings import MAX_PATH_CHARS

    wide = os.fsdecode(b"\xff") * MAX_PATH_CHARS  # six bytes each as a JSON escape
    longest = Settings(system_prompt="\x01" * MAX_TEXT_CHARS, window_geometry="\x02" * MAX_TEXT_CHARS,
                       target_path=wide, draft_path=wide)
    save_settings(longest)  # control characters take six bytes each in JSON
    loaded = load_settings()
    assert loaded.notice is None and loaded.settings == longest
    with pytest.raises(InvalidSettingError, match="at most 100,000 characters"):
        Settings(system_prompt="x" * (MAX_TEXT_CHARS + 1))
