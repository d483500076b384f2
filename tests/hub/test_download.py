"""Downloads into the Hugging Face cache: verified against the Hub's sha256, resumed
after a drop, a cancel or a restart, and never a half file where a model should be."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

from app.hub import connection, download
from app.hub.connection import HubError
from app.hub.download import PARTIAL, DownloadCancelled, pull, repo_folder
from app.hub.files import HubFile
from hub.conftest import DEMO_REPO, DRAFT, TARGET


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(connection, "BACKOFF_S", 0.0)


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _partials() -> list:
    return sorted((repo_folder(DEMO_REPO) / "blobs").glob(f"*{PARTIAL}"))


def test_a_pull_lands_in_the_hub_cache_verified(hub, demo_models):
    pulled = pull(HubFile(DEMO_REPO, DRAFT))
    assert pulled.verified and pulled.downloaded == pulled.size == demo_models.draft.stat().st_size
    assert _sha(pulled.path) == _sha(demo_models.draft)
    # huggingface_hub's own layout: a snapshot link into the blobs, a ref for main.
    snapshot = repo_folder(DEMO_REPO) / "snapshots" / hub.repos[DEMO_REPO].sha / DRAFT
    assert pulled.path == snapshot and snapshot.is_symlink()
    assert (repo_folder(DEMO_REPO) / "refs" / "main").read_text() == hub.repos[DEMO_REPO].sha
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache(DEMO_REPO, DRAFT, cache_dir=download.hub_cache()) == str(snapshot)
    again = pull(HubFile(DEMO_REPO, DRAFT))
    assert (again.path, again.downloaded) == (pulled.path, 0)
    assert not _partials()


def test_a_dropped_connection_resumes_with_a_range(hub, demo_models):
    spec = hub.file(DEMO_REPO, DRAFT)
    spec.drop_after = [30 << 20, 20 << 20]
    pulled = pull(HubFile(DEMO_REPO, DRAFT))
    assert pulled.verified and _sha(pulled.path) == _sha(demo_models.draft)
    assert spec.gets == 3 and spec.ranges == [f"bytes={30 << 20}-", f"bytes={50 << 20}-"]


def test_an_interrupted_pull_is_resumed_by_the_next_one(hub, demo_models, monkeypatch):
    monkeypatch.setattr(connection, "RETRIES", 1)
    spec = hub.file(DEMO_REPO, DRAFT)
    spec.drop_after = [40 << 20, 0]
    with pytest.raises(HubError, match="is kept") as err:
        pull(HubFile(DEMO_REPO, DRAFT))
    assert "\n" not in str(err.value)
    [partial] = _partials()
    assert partial.stat().st_size == 40 << 20
    pulled = pull(HubFile(DEMO_REPO, DRAFT))  # as a new process would: from the disk
    assert pulled.resumed == 40 << 20 and pulled.downloaded == pulled.size - (40 << 20)
    assert spec.ranges[-1] == f"bytes={40 << 20}-"
    assert pulled.verified and _sha(pulled.path) == _sha(demo_models.draft)


def test_a_cancel_keeps_what_came_and_the_next_pull_resumes(hub, demo_models):
    seen = []

    def progress(what, done, total):
        seen.append(done)
        return done < (20 << 20)

    with pytest.raises(DownloadCancelled, match="resumes"):
        pull(HubFile(DEMO_REPO, DRAFT), progress)
    [partial] = _partials()
    kept = partial.stat().st_size
    assert kept >= 20 << 20
    assert not (repo_folder(DEMO_REPO) / "snapshots").exists() or not any((repo_folder(DEMO_REPO) / "snapshots").rglob("*.gguf"))
    pulled = pull(HubFile(DEMO_REPO, DRAFT))
    assert pulled.resumed == kept and pulled.verified
    assert _sha(pulled.path) == _sha(demo_models.draft)


def test_bytes_that_do_not_match_the_hash_are_deleted(hub):
    hub.file(DEMO_REPO, DRAFT).corrupt = True
    with pytest.raises(HubError, match="does not match the Hub's hash") as err:
        pull(HubFile(DEMO_REPO, DRAFT))
    assert "\n" not in str(err.value)
    assert not _partials()
    assert not list((repo_folder(DEMO_REPO) / "blobs").iterdir())
    from app.library.locations import hub_file

    assert hub_file(f"{DEMO_REPO}/{DRAFT}") is None


def test_a_server_that_ignores_the_range_starts_over_and_still_verifies(hub, demo_models):
    blobs = repo_folder(DEMO_REPO) / "blobs"
    blobs.mkdir(parents=True)
    spec = hub.file(DEMO_REPO, DRAFT)
    (blobs / (spec.sha256 + PARTIAL)).write_bytes(demo_models.draft.read_bytes()[:1000])
    spec.no_range = True
    pulled = pull(HubFile(DEMO_REPO, DRAFT))
    assert pulled.verified and _sha(pulled.path) == _sha(demo_models.draft)


def test_a_partial_file_that_is_not_the_files_beginning_fails_the_hash_and_goes(hub):
    blobs = repo_folder(DEMO_REPO) / "blobs"
    blobs.mkdir(parents=True)
    spec = hub.file(DEMO_REPO, DRAFT)
    (blobs / (spec.sha256 + PARTIAL)).write_bytes(b"\0" * 4096)
    with pytest.raises(HubError, match="hash"):
        pull(HubFile(DEMO_REPO, DRAFT))
    assert not _partials()
    assert pull(HubFile(DEMO_REPO, DRAFT)).verified


def test_too_little_disk_is_said_before_a_byte_is_downloaded(hub, monkeypatch):
    real = download.shutil.disk_usage
    monkeypatch.setattr(download.shutil, "disk_usage", lambda p: real(p)._replace(free=50 << 20))
    with pytest.raises(HubError, match="not enough free disk"):
        pull(HubFile(DEMO_REPO, DRAFT))
    assert hub.file(DEMO_REPO, DRAFT).gets == 0 and not _partials()


def test_a_disk_that_fills_up_leaves_no_partial_file(hub, monkeypatch):
    real_open = open

    class Filling:
        def __init__(self, f):
            self.f, self.written = f, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.written += len(data)
            if self.written > (10 << 20):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(data)

    def opening(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        return Filling(f) if str(path).endswith(PARTIAL) and "a" in mode or "w" in mode and str(path).endswith(PARTIAL) else f

    monkeypatch.setattr(download, "open", opening, raising=False)
    with pytest.raises(HubError, match="disk filled up") as err:
        pull(HubFile(DEMO_REPO, DRAFT))
    assert "\n" not in str(err.value)
    assert not _partials()


def test_the_library_sees_a_pulled_pair_and_pairs_them(hub, tmp_path):
    from app.library.drafts import find_drafts
    from app.library.scan import library_locations, scan_library

    pull(HubFile(DEMO_REPO, TARGET))
    pull(HubFile(DEMO_REPO, DRAFT))
    result = scan_library(library_locations(environ=dict(os.environ), home=tmp_path, own=[]), use_cache=False)
    names = {e.name: e for e in result.usable}
    target, draft = names[f"{DEMO_REPO}/{TARGET}"], names[f"{DEMO_REPO}/{DRAFT}"]
    candidates = find_drafts(target, result.usable)
    assert any(c.entry.name == draft.name and c.compatible for c in candidates)


def test_a_busy_file_server_is_retried_with_backoff(hub, demo_models, monkeypatch):
    waits = []
    spec = hub.file(DEMO_REPO, DRAFT)
    spec.statuses = [500, 502, 429]
    pulled = pull(HubFile(DEMO_REPO, DRAFT), sleep=waits.append)
    assert pulled.verified and spec.gets == 4
    assert waits == [0.0, 0.0, 0.0]  # BACKOFF_S is 0 here; the real one doubles from 0.5 s


def test_a_gated_repository_needs_the_token_and_says_so(hub, monkeypatch, demo_models):
    hub.add("org/Gated-GGUF", {}, gated=True)
    hub.add_file("org/Gated-GGUF", "m-Q4_1.gguf", demo_models.draft)
    pulled = pull(HubFile("org/Gated-GGUF", "m-Q4_1.gguf"))  # HF_TOKEN is set
    assert pulled.verified and "/org/Gated-GGUF/resolve/main/m-Q4_1.gguf" in hub.authorized
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_TOKEN_PATH", str(repo_folder("x").parent / "no-token"))
    with pytest.raises(HubError, match="gated") as err:
        pull(HubFile("org/Gated-GGUF", "m-Q4_1.gguf"))
    assert "\n" not in str(err.value) and "HF_TOKEN" in str(err.value)


def test_a_pulled_file_is_found_in_the_cache_while_the_hub_is_down(hub):
    first = pull(HubFile(DEMO_REPO, DRAFT))
    hub.stop()
    again = pull(HubFile(DEMO_REPO, DRAFT))
    assert (again.path, again.downloaded) == (first.path, 0)
    with pytest.raises(HubError, match="cannot reach"):
        pull(HubFile(DEMO_REPO, TARGET))  # never downloaded: the Hub's absence is said
