from __future__ import annotations

import json
import os

import pytest

from app.errors import TandemError
from app.storage import paths, settings as settings_module
from app.storage.errors import InvalidSettingError, StorageError
from app.storage.settings import Settings, load_settings, options, save_settings


def write_raw(content: str | bytes) -> None:
    path = paths.settings_file()
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def write_document(values: dict, version: int = 1) -> None:
    write_raw(json.dumps({"version": version, "settings": values}))


def bad_files() -> list:
    return sorted(paths.config_dir().glob("settings.json.bad-*"))


def test_missing_file_gives_defaults_quietly():
    loaded = load_settings()
    assert loaded.settings == Settings()
    assert loaded.notice is None


def test_defaults_match_the_declaration():
    defaults = Settings()
    assert defaults.drafter == "model" and defaults.draft_max == "auto" and defaults.n_ctx == 4096
    assert defaults.top_p == 0.95 and defaults.target_gpu_layers == "auto" and defaults.speculation is True
    for option in options():
        assert option.description.strip(), f"{option.name} has no description"
        assert getattr(defaults, option.name) == option.default


def test_round_trip_keeps_every_value():
    chosen = Settings().replace(
        target_path="/models/big model.gguf", draft_path="/models/small.gguf", drafter="lookup",
        speculation=False, draft_max=7, draft_min=2, p_min=0.25, target_gpu_layers=12, draft_gpu_layers=0,
        n_ctx=8192, n_threads=6, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=1234,
        max_tokens=64, system_prompt="Réponds brièvement.\nNo <b>markup</b> ✓", show_colours=False,
        window_geometry="AdnQywADAAA=")
    save_settings(chosen)
    loaded = load_settings()
    assert loaded.notice is None
    assert loaded.settings == chosen
    document = json.loads(paths.settings_file().read_text(encoding="utf-8"))
    assert document["version"] == 1
    assert document["settings"]["draft_max"] == 7


def test_replace_rejects_a_bad_value_with_a_one_line_message():
    with pytest.raises(InvalidSettingError) as caught:
        Settings().replace(top_p=0.0)
    assert isinstance(caught.value, TandemError)
    assert "top_p" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(InvalidSettingError):
        Settings().replace(n_ctx=True)  # a bool is not a context size
    with pytest.raises(InvalidSettingError):
        Settings().replace(drafter="ngram")
    assert Settings().replace(temperature=1).temperature == 1.0  # whole numbers are fine for floats


@pytest.mark.parametrize("content", [
    "{not json",
    b"\xff\xfe\x00garbage",
    "[1, 2, 3]",
    '{"version": 1}',
    '{"version": 1, "settings": [1]}',
    '{"settings": {}}',
    '{"version": 99, "settings": {"top_k": 5}}',
    "",
])
def test_unusable_file_gives_defaults_and_keeps_the_bad_file(content):
    write_raw(content)
    original = paths.settings_file().read_bytes()

    loaded = load_settings()

    assert loaded.settings == Settings()
    [kept] = bad_files()
    assert kept.read_bytes() == original
    assert str(kept) in loaded.notice and "\n" not in loaded.notice
    assert not paths.settings_file().exists()
    assert load_settings().notice is None  # the next start is quiet


def test_invalid_values_take_their_defaults_and_are_named():
    write_document({"top_p": 1.5, "n_ctx": "big", "draft_max": 0, "temperature": 0.2,
                    "system_prompt": "kept", "speculation": "yes"})

    loaded = load_settings()

    assert loaded.settings == Settings().replace(temperature=0.2, system_prompt="kept")
    for name in ("top_p", "n_ctx", "draft_max", "speculation"):
        assert name in loaded.notice
    assert "temperature" not in loaded.notice
    [kept] = bad_files()
    assert str(kept) in loaded.notice
    assert json.loads(kept.read_text())["settings"]["top_p"] == 1.5
    # The file now holds the repaired settings, so the next start neither warns nor loses them.
    again = load_settings()
    assert again.notice is None and again.settings == loaded.settings


def test_unknown_keys_are_ignored():
    write_document({"top_k": 7, "telemetry": True})
    loaded = load_settings()
    assert loaded.notice is None and loaded.settings.top_k == 7


def test_missing_keys_take_defaults():
    write_document({"seed": 42})
    assert load_settings().settings == Settings().replace(seed=42)


def test_atomic_write_leaves_only_the_settings_file():
    for top_k in range(5):
        save_settings(Settings().replace(top_k=top_k))
    assert [p.name for p in paths.config_dir().iterdir()] == ["settings.json"]
    assert load_settings().settings.top_k == 4


def test_a_failed_write_keeps_the_old_file_and_no_temp(monkeypatch):
    save_settings(Settings().replace(seed=1))
    before = paths.settings_file().read_bytes()

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", disk_full)
        with pytest.raises(StorageError, match="No space left"):
            save_settings(Settings().replace(seed=2))

    assert paths.settings_file().read_bytes() == before
    assert [p.name for p in paths.config_dir().iterdir()] == ["settings.json"]


def test_save_to_an_impossible_place_is_a_storage_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StorageError):
        save_settings(Settings(), blocker / "settings.json")


def test_migrations_upgrade_an_older_file(monkeypatch):
    def rename_k(values):  # pretend version 2 renamed "k" to "top_k"
        values["top_k"] = values.pop("k")
        return values

    monkeypatch.setattr(settings_module, "SETTINGS_VERSION", 2)
    monkeypatch.setattr(settings_module, "MIGRATIONS", {1: rename_k})
    write_document({"k": 11, "seed": 5}, version=1)

    loaded = load_settings()

    assert loaded.notice is None
    assert (loaded.settings.top_k, loaded.settings.seed) == (11, 5)


def test_an_old_file_without_a_migration_is_set_aside(monkeypatch):
    monkeypatch.setattr(settings_module, "SETTINGS_VERSION", 3)
    monkeypatch.setattr(settings_module, "MIGRATIONS", {2: lambda values: values})
    write_document({"seed": 5}, version=1)
    loaded = load_settings()
    assert loaded.settings == Settings() and "version 1" in loaded.notice


def test_rpc_workers_and_their_split_are_checked_kept_in_one_spelling_and_reach_the_load():
    from app.session.config import ModelSpec

    settings = Settings(rpc_workers=" 192.168.1.20:50052 , box:07 ", tensor_split="3/1")
    assert (settings.rpc_workers, settings.tensor_split) == ("192.168.1.20:50052,box:7", "3,1")
    spec = ModelSpec.from_settings(settings)
    assert spec.rpc_workers == ("192.168.1.20:50052", "box:7") and spec.tensor_split == (3.0, 1.0)
    assert ModelSpec.from_settings(Settings()).rpc_workers == ()
    with pytest.raises(InvalidSettingError, match="host:port"):
        Settings(rpc_workers="192.168.1.20")
    with pytest.raises(InvalidSettingError, match="shares"):
        Settings(tensor_split="1,x")
