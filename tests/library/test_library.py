"""The model library over a real folder tree of small GGUF files written here: LM Studio's
layout, Ollama's manifests and blobs, the Hugging Face hub cache with its snapshot links,
a user folder with a split model and hostile files; then the draft finder's ranking."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from .library_tree import build_folder, build_home, hub_file, model, ollama_blob

from app.library.cache import CACHE_VERSION, load_cache
from app.library.drafts import compatible_drafts, find_drafts
from app.library.entries import parameters_shown, quantisation_in_name
from app.library.locations import FOLDER, HUGGING_FACE, LM_STUDIO, OLLAMA, Location
from app.library.scan import library_locations, scan_library

@pytest.fixture
def home(tmp_path: Path) -> Path:
    return build_home(tmp_path)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return build_folder(tmp_path)


def scan(home: Path, folder: Path, tmp_path: Path, **kw):
    locations = library_locations([folder], environ={}, home=home)
    return scan_library(locations, cache_path=tmp_path / "library.json", **kw)


def by_name(result, name: str):
    return next(e for e in result.entries if e.name == name)


def test_scan_names_every_file_as_its_owner_does(home, folder, tmp_path):
    result = scan(home, folder, tmp_path)
    kinds = [location.kind for location in result.locations]
    assert kinds == [LM_STUDIO, OLLAMA, HUGGING_FACE, FOLDER]
    names = {e.name: e for e in result.entries}
    assert set(names) == {
        "bigco/Big-7B-GGUF/Big-7B-Q8_0.gguf", "bigco/Big-7B-GGUF/Big-0.5B-Q4_K_M.gguf", "tiny:latest",
        "bigco/Huge-GGUF/Huge-F16.gguf",
        "org/Near-GGUF/near-q4_0.gguf", "org/Other-GGUF/other-q4_0.gguf", "org/Diff-GGUF/diff.gguf",
        "org/Wide-GGUF/wide.gguf", "org/Bos-GGUF/bos.gguf",
        "Big-7B-Q8_0-00001-of-00002.gguf", "Whole-00001-of-00002.gguf",
        "garbage.gguf", "pointer.gguf", "empty.gguf"}
    tiny = names["tiny:latest"]
    assert tiny.source == OLLAMA and Path(tiny.path).name.startswith("sha256-")
    assert (tiny.architecture, tiny.context_length, tiny.n_parameters) == ("llama", 2048, 8)
    assert tiny.size == Path(tiny.path).stat().st_size
    big = names["bigco/Big-7B-GGUF/Big-7B-Q8_0.gguf"]
    assert big.quantisation == "Q8_0" and big.source == LM_STUDIO  # from the name: the file has no file_type
    whole = names["Whole-00001-of-00002.gguf"]
    assert whole.usable and whole.parts == 2 and whole.n_parameters == 16 and "split in 2 parts" in whole.notes
    assert whole.size == sum(p.stat().st_size for p in folder.glob("Whole-*"))


def test_hostile_files_are_refused_with_the_validators_reason(home, folder, tmp_path):
    result = scan(home, folder, tmp_path)
    refused = {e.name: e.refused for e in result.refused}
    assert set(refused) == {"garbage.gguf", "pointer.gguf", "empty.gguf", "Big-7B-Q8_0-00001-of-00002.gguf"}
    assert "declares" in refused["garbage.gguf"] and "\n" not in refused["garbage.gguf"]
    assert "Git LFS pointer" in refused["pointer.gguf"]
    assert "is empty" in refused["empty.gguf"]
    assert "2 parts, 1 missing" in refused["Big-7B-Q8_0-00001-of-00002.gguf"]
    assert result.entries[-1].refused  # refused ones are listed after the usable


def test_a_rescan_reads_only_what_changed(home, folder, tmp_path):
    first = scan(home, folder, tmp_path)
    assert first.read == len(first.entries)
    again = scan(home, folder, tmp_path)
    assert again.read == 0 and again.entries == first.entries
    changed = home / ".lmstudio/models/bigco/Big-7B-GGUF/Big-0.5B-Q4_K_M.gguf"
    model(changed, padding=5_000)  # rewritten: new size and time
    third = scan(home, folder, tmp_path)
    assert third.read == 1
    assert by_name(third, "bigco/Big-7B-GGUF/Big-0.5B-Q4_K_M.gguf").size == changed.stat().st_size


@pytest.mark.parametrize("content", [b"{not json", b"[" * 100_000,
                                     b'{"version": %d, "entries": [{"path": 5}, 7]}' % CACHE_VERSION, b"\xff\xfe",
                                     json.dumps({"version": CACHE_VERSION, "entries": [{"path": "x"}]}).encode()])
def test_a_damaged_cache_only_costs_a_full_scan(home, folder, tmp_path, content):
    (tmp_path / "library.json").write_bytes(content)
    assert load_cache(tmp_path / "library.json") == {}
    result = scan(home, folder, tmp_path)
    assert result.read == len(result.entries) == 14


def test_cached_entries_that_lie_about_their_types_are_read_again(home, folder, tmp_path):
    scan(home, folder, tmp_path)
    document = json.loads((tmp_path / "library.json").read_text())
    document["entries"][0]["n_parameters"] = "many"
    document["entries"][1]["vocabulary"] = {"vocab_type": 1}
    (tmp_path / "library.json").write_text(json.dumps(document))
    assert scan(home, folder, tmp_path).read == 2


def test_progress_and_cancel(home, folder, tmp_path):
    stop = threading.Event()
    seen = []

    def progress(done, total, name):
        seen.append((done, total))
        if done == 2:
            stop.set()

    result = scan(home, folder, tmp_path, progress=progress, cancel=stop)
    assert result.cancelled and len(result.entries) == 3
    assert seen[0] == (0, 14) and seen[-1] == (2, 14)
    # What it did read is remembered.
    assert scan(home, folder, tmp_path).read == 11


def test_environment_moves_the_places(tmp_path):
    ollama = tmp_path / "elsewhere" / "ollama"
    hub = tmp_path / "elsewhere" / "hub"
    ollama_blob(ollama, "moved", "q4")
    hub_file(hub, "a/b", "b.gguf")
    locations = library_locations(environ={"OLLAMA_MODELS": str(ollama), "HF_HUB_CACHE": str(hub)},
                                  home=tmp_path / "nobody")
    assert [(l.kind, l.path) for l in locations] == [(OLLAMA, ollama), (HUGGING_FACE, hub)]
    result = scan_library(locations, use_cache=False)
    assert [e.name for e in result.entries] == ["a/b/b.gguf", "moved:q4"]


def test_no_places_says_what_to_do(tmp_path):
    result = scan_library(library_locations(environ={}, home=tmp_path), use_cache=False)
    assert result.entries == [] and "add a folder" in result.notes[0]


def test_an_ollama_manifest_that_lies_names_nothing(tmp_path):
    root = tmp_path / "ollama"
    blob = ollama_blob(root, "ok", "latest")
    bad = root / "manifests" / "registry.ollama.ai" / "library" / "bad"
    bad.mkdir(parents=True)
    (bad / "deep").write_text("[" * 50_000)
    (bad / "escape").write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:../../../etc/passwd"}]}))
    (bad / "missing").write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "a" * 64}]}))
    result = scan_library([Location(OLLAMA, root)], use_cache=False)
    assert [(e.name, e.path) for e in result.entries] == [("ok:latest", str(blob))]


def test_drafts_ranked_best_first_with_reasons_for_the_rest(home, folder, tmp_path):
    result = scan(home, folder, tmp_path)
    target = by_name(result, "bigco/Big-7B-GGUF/Big-7B-Q8_0.gguf")
    ranked = find_drafts(target, result.entries)
    verdicts = [(c.entry.name, c.compatible) for c in ranked]
    assert verdicts[:6] == [
        ("tiny:latest", True),                              # same family, same vocabulary, smallest
        ("Whole-00001-of-00002.gguf", True),                # (in two parts, sizes added)
        ("bigco/Big-7B-GGUF/Big-0.5B-Q4_K_M.gguf", True),
        ("org/Near-GGUF/near-q4_0.gguf", True),             # same family, a vocabulary within the rules
        ("org/Other-GGUF/other-q4_0.gguf", True),           # another family sharing the vocabulary
        ("bigco/Huge-GGUF/Huge-F16.gguf", True),            # not smaller than the target: last
    ]
    assert ranked[0].size_ratio > 10 and "smaller than the target" in ranked[0].reason
    assert "not smaller" in ranked[5].reason
    # Another vocabulary drafts through text: listed after every same-vocabulary draft, marked.
    assert [c.through_text for c in ranked] == [False] * 6 + [True] * (len(ranked) - 6)
    reasons = {c.entry.name: c.reason for c in ranked if c.through_text}
    assert set(reasons) == {"org/Diff-GGUF/diff.gguf", "org/Wide-GGUF/wide.gguf", "org/Bos-GGUF/bos.gguf"}
    assert all("drafts through text" in reason for reason in reasons.values())
    assert "token 10 differs" in reasons["org/Diff-GGUF/diff.gguf"]
    assert "vocabulary sizes differ" in reasons["org/Wide-GGUF/wide.gguf"]
    assert "BOS token ids differ" in reasons["org/Bos-GGUF/bos.gguf"]
    assert all(c.entry.usable for c in ranked) and target not in [c.entry for c in ranked]
    assert [c.entry.name for c in compatible_drafts(target, result.entries)] == [n for n, ok in verdicts if ok]


def test_a_draft_changed_since_the_scan_is_judged_by_what_is_there_now(home, folder, tmp_path):
    result = scan(home, folder, tmp_path)
    target = by_name(result, "bigco/Big-7B-GGUF/Big-7B-Q8_0.gguf")
    near = by_name(result, "org/Near-GGUF/near-q4_0.gguf")
    Path(near.path).resolve().write_bytes(b"GGUF")  # replaced by a stub after the scan
    candidate = next(c for c in find_drafts(target, result.entries) if c.entry.name == near.name)
    assert not candidate.compatible and candidate.reason.startswith("changed since the scan")


def test_words_for_numbers():
    assert parameters_shown(134_515_008) == "135M" and parameters_shown(7_241_732_096) == "7.2B"
    assert parameters_shown(0) == "?"
    assert quantisation_in_name("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quantisation_in_name("model-f16.gguf") == "F16" and quantisation_in_name("model.gguf") == ""


def test_a_file_that_is_gone_says_so(tmp_path):
    from app.library.entries import read_entry

    entry = read_entry(tmp_path / "gone.gguf", "gone.gguf", FOLDER)
    assert not entry.usable and "does not exist" in entry.refused


def test_odd_directory_entries_are_passed_over(tmp_path):
    """A FIFO named like a model (reading it would block), a link to a device, a dangling
    link and an unreadable folder: none stops or hangs the scan."""
    folder = tmp_path / "odd"
    good = model(folder / "good.gguf")
    os.mkfifo(folder / "fifo.gguf")
    (folder / "zero.gguf").symlink_to("/dev/zero")
    (folder / "dangling.gguf").symlink_to(folder / "nowhere.gguf")
    locked = folder / "locked"
    locked.mkdir()
    model(locked / "hidden.gguf")
    locked.chmod(0)
    try:
        result = scan_library([Location(FOLDER, folder)], use_cache=False)
    finally:
        locked.chmod(0o755)
    names = [e.name for e in result.entries]
    assert "good.gguf" in names and "fifo.gguf" not in names and "zero.gguf" not in names
    assert "dangling.gguf" not in names
    assert by_name(result, "good.gguf").path == str(good)


def test_the_header_names_the_quantisation_when_it_can(tmp_path):
    from app.library.entries import read_entry

    f32 = read_entry(model(tmp_path / "a.gguf", file_type=0), "a.gguf", FOLDER)
    q4 = read_entry(model(tmp_path / "named-Q8_0.gguf", file_type=3), "named-Q8_0.gguf", FOLDER)
    assert (f32.quantisation, q4.quantisation) == ("F32", "Q4_1")  # the header wins over the name


def test_the_models_tandem_fetched_made_and_uses_are_listed(tmp_path, tandem_home):
    """A machine where Tandem downloaded the demo pair and made a draft lists them, and a
    pair in use elsewhere, though no other app's folder exists."""
    from app.library.locations import TANDEM

    demo = model(tandem_home / "cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    made = model(tandem_home / "data" / "drafts" / "made-here.gguf")
    chosen = model(tmp_path / "elsewhere" / "chosen.gguf")
    (tandem_home / "data" / "history.sqlite3").write_bytes(b"SQLite format 3\x00")  # not a model
    locations = library_locations(environ={}, home=tmp_path / "nobody")
    assert [(l.kind, l.path) for l in locations] == [(TANDEM, tandem_home / "cache" / "models"),
                                                     (TANDEM, tandem_home / "data")]
    result = scan_library(locations, use_cache=False,
                          in_use=[str(chosen), str(demo), str(tmp_path / "deleted.gguf"), ""])
    assert {(e.name, e.source) for e in result.entries} == {
        ("SmolLM2-135M-Instruct.Q4_1.gguf", TANDEM), ("drafts/made-here.gguf", TANDEM), ("chosen.gguf", TANDEM)}
    assert all(e.usable for e in result.entries)
    assert {Path(e.path) for e in result.entries} == {demo, made, chosen}  # the demo once, a gone file not at all
    assert "add a folder" in result.notes[0]  # still: no other app's models were found


def test_a_file_in_use_inside_a_place_keeps_that_places_name(home, tmp_path):
    big = home / ".lmstudio" / "models" / "bigco" / "Big-7B-GGUF" / "Big-7B-Q8_0.gguf"
    result = scan_library(library_locations(environ={}, home=home), use_cache=False, in_use=[str(big)])
    [entry] = [e for e in result.entries if Path(e.path) == big]
    assert (entry.name, entry.source) == ("bigco/Big-7B-GGUF/Big-7B-Q8_0.gguf", LM_STUDIO)
