"""A model on the Hub planned from its header alone: range requests, the local walk's
limits, and one line for every way the network or the file fails."""

from __future__ import annotations

import struct

import pytest

from app.engine.errors import ModelFileError
from app.engine.gguf.header import validate_gguf
from app.engine.gguf.model_file import open_model_file
from app.hub import connection, remote_header
from app.hub.connection import HubError, HubNotFound, HubUnreachable
from app.hub.files import HubFile
from app.hub.remote_header import read_remote_model
from app.session.fit import plan_files, read_machine
from hub.conftest import DEMO_REPO, DRAFT, TARGET
from hub.fake_hub import HubFileSpec


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(connection, "BACKOFF_S", 0.0)


def _plan_figures(target, draft, gpu):
    plan = plan_files(target, draft, n_ctx=4096, machine=read_machine(gpu))
    return [(p.estimate.parts(), p.gpu_layers) for p in plan.models], plan.fits


@pytest.mark.parametrize("gpu", [0, 300 << 20, 8 << 30])
def test_the_plan_from_remote_headers_is_the_plan_from_the_files(hub, demo_models, gpu):
    target = read_remote_model(HubFile(DEMO_REPO, TARGET))
    draft = read_remote_model(HubFile(DEMO_REPO, DRAFT))
    assert target.size == demo_models.target.stat().st_size
    # The header, not the weights: a few MB of a 540 MB file.
    assert target.header_bytes <= remote_header.FIRST_READ < target.size // 100
    assert _plan_figures(target.model, draft.model, gpu) == _plan_figures(demo_models.target, demo_models.draft, gpu)
    local = open_model_file(demo_models.target)
    assert target.model.metadata.tokens == local.metadata.tokens
    assert target.model.header.tensors == local.header.tensors
    # Every read was a range request, none for the whole file.
    ranges = hub.file(DEMO_REPO, TARGET).ranges
    assert ranges and all(r.startswith("bytes=0-") or r.startswith("bytes=") and "-" in r for r in ranges)


def test_a_header_longer_than_the_first_read_is_read_on(hub, demo_models, monkeypatch):
    monkeypatch.setattr(remote_header, "FIRST_READ", 4096)
    remote = read_remote_model(HubFile(DEMO_REPO, DRAFT))
    assert remote.model.metadata.tokens == open_model_file(demo_models.draft).metadata.tokens
    assert len(hub.file(DEMO_REPO, DRAFT).ranges) > 1


def test_a_server_that_ignores_ranges_still_gives_the_header(hub, demo_models):
    hub.file(DEMO_REPO, DRAFT).no_range = True
    remote = read_remote_model(HubFile(DEMO_REPO, DRAFT))
    assert remote.size == demo_models.draft.stat().st_size


def test_busy_answers_are_retried(hub):
    hub.file(DEMO_REPO, DRAFT).statuses = [500, 503, 429]
    assert read_remote_model(HubFile(DEMO_REPO, DRAFT)).model.n_layers == 30


def test_a_hub_that_keeps_failing_is_one_line(hub):
    hub.file(DEMO_REPO, DRAFT).statuses = [500] * 10
    with pytest.raises(HubError, match="HTTP 500") as err:
        read_remote_model(HubFile(DEMO_REPO, DRAFT))
    assert "\n" not in str(err.value)


def test_a_slow_hub_is_one_line(hub, monkeypatch):
    monkeypatch.setattr(connection, "READ_TIMEOUT_S", 0.3)
    monkeypatch.setattr(connection, "RETRIES", 1)
    hub.file(DEMO_REPO, DRAFT).delay_s = 2.0
    with pytest.raises(HubUnreachable, match="did not answer in time"):
        read_remote_model(HubFile(DEMO_REPO, DRAFT))


@pytest.mark.parametrize("file, words", [
    (HubFile("nobody/nothing-GGUF", "m.gguf"), "no such repository"),
    (HubFile(DEMO_REPO, "missing.gguf"), "no such file"),
    (HubFile(DEMO_REPO, DRAFT, "no-such-branch"), "no such revision"),
])
def test_what_the_hub_lacks_is_one_line(hub, file, words):
    with pytest.raises(HubNotFound, match=words) as err:
        read_remote_model(file)
    assert "\n" not in str(err.value)


def _kv_string(key: str, length: int) -> bytes:
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, length)


@pytest.mark.parametrize("name, data, words", [
    ("page.gguf", b"<!doctype html><html>not a model</html>" * 10, "not a GGUF file"),
    ("empty.gguf", b"", "empty"),
    # a string that claims more bytes than the file has
    ("lying.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _kv_string("general.name", 1 << 40) + b"x" * 64,
     "runs past the end of the file"),
    # a count no file could hold
    ("counts.gguf", b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 1) + b"\0" * 64, "more than the rest of the file"),
])
def test_a_hostile_header_on_the_hub_is_refused_as_a_local_one_is(hub, tmp_path, name, data, words):
    hub.repos[DEMO_REPO].files[name] = HubFileSpec(data)
    with pytest.raises((ModelFileError, HubError), match=words) as err:
        read_remote_model(HubFile(DEMO_REPO, name))
    assert "\n" not in str(err.value)
    local = tmp_path / name
    local.write_bytes(data)
    with pytest.raises(ModelFileError, match=words):
        validate_gguf(local)


def test_a_truncated_file_is_refused(hub, demo_models):
    hub.repos[DEMO_REPO].files["cut.gguf"] = HubFileSpec(demo_models.draft.read_bytes()[:3 << 20])
    with pytest.raises(ModelFileError, match="truncated"):
        read_remote_model(HubFile(DEMO_REPO, "cut.gguf"))


def test_a_header_that_goes_on_past_the_limit_is_not_read_further(hub, monkeypatch):
    monkeypatch.setattr(remote_header, "FIRST_READ", 1 << 16)
    monkeypatch.setattr(remote_header, "MOST_HEADER", 1 << 20)
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _kv_string("general.name", 3 << 20) + b"a" * (3 << 20)
    hub.repos[DEMO_REPO].files["huge-header.gguf"] = HubFileSpec(data)
    with pytest.raises(HubError, match="past 1 MiB"):
        read_remote_model(HubFile(DEMO_REPO, "huge-header.gguf"))
    assert sum(int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0]) + 1
               for r in hub.file(DEMO_REPO, "huge-header.gguf").ranges) <= 1 << 20


def test_a_hostile_model_gives_the_same_reason_remote_and_local(hub, tmp_path):
    from hostile_models import write_all

    for name, path in list(write_all(tmp_path).items())[:6]:
        try:
            open_model_file(path)
            continue  # refused only by the trial load: a header cannot say
        except ModelFileError as exc:
            local = str(exc).split(": ", 1)[1]
        hub.add_file(DEMO_REPO, path.name, path)
        with pytest.raises(ModelFileError) as err:
            read_remote_model(HubFile(DEMO_REPO, path.name))
        assert str(err.value).split(": ", 1)[1] == local, name


def test_offline_is_one_line_before_any_request(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnreachable, match="HF_HUB_OFFLINE"):
        read_remote_model(HubFile(DEMO_REPO, DRAFT))
    assert hub.requests == []


def test_a_hub_that_is_down_is_one_line(hub):
    hub.stop()
    with pytest.raises(HubUnreachable, match="cannot reach"):
        read_remote_model(HubFile(DEMO_REPO, DRAFT))


def _split_model(folder, demo_models):
    """A model in two parts, as gguf-split writes one: the metadata in the first."""
    from recurrent_models import write_split_part

    return [write_split_part(folder / "m-Q8_0-00001-of-00002.gguf", [("blk.0.ffn_up.weight", 1000)],
                             vocab_from=demo_models.draft),
            write_split_part(folder / "m-Q8_0-00002-of-00002.gguf", [("blk.1.ffn_up.weight", 3000)])]


def test_a_split_model_on_the_hub_counts_and_downloads_every_part(hub, demo_models, tmp_path):
    from app.hub.download import pull
    from app.session.fit import estimate_for

    first, second = _split_model(tmp_path, demo_models)
    for part in (first, second):
        hub.add_file(DEMO_REPO, f"split/{part.name}", part)
    remote = read_remote_model(HubFile(DEMO_REPO, f"split/{first.name}"))
    assert remote.size == first.stat().st_size + second.stat().st_size
    local = estimate_for(open_model_file(first), 1024, draft=False)
    assert [layer.weights for layer in estimate_for(remote.model, 1024, draft=False).layers] == \
        [layer.weights for layer in local.layers] == [4000, 12000]
    pulled = pull(HubFile(DEMO_REPO, f"split/{first.name}"))
    assert pulled.path.name == first.name and (pulled.path.parent / second.name).is_file()
    assert pulled.size == remote.size and pulled.verified
