"""The window's engine client over the engine host on a thread (``app.enginehost.thread_link``),
driven by a scripted session (no model): the same client, host and messages as the app's
engine process."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.bridge.engine_process import EngineProcessClient
from app.engine.errors import ContextOverflowError, ModelFileError
from app.errors import one_line
from app.session import loading
from app.session.config import ModelSpec

from .fakes import ScriptedLoader, scripted_client, tokens


@pytest.fixture
def client(qtbot):
    clients = []

    def make(loader) -> EngineProcessClient:
        c = scripted_client(loader)
        clients.append(c)
        with qtbot.waitSignal(c.loaded, timeout=10_000):
            c.load(ModelSpec(target_path="scripted.gguf"))
        return c

    yield make
    for c in clients:
        c.shutdown()


def test_a_fast_stream_arrives_whole_in_few_batches_and_ends_after_its_tokens(qtbot, client):
    events = tokens(*[f" w{i}" for i in range(3000)])
    c = client(ScriptedLoader(events))
    seen: list[str] = []
    batches = []
    c.tokens.connect(lambda rid, evs, stats: (batches.append(len(evs)), seen.extend(e.text for e in evs)))
    order = []
    c.finished.connect(lambda rid, stats: order.append(("finished", len(seen), stats.tokens)))
    with qtbot.waitSignal(c.finished, timeout=20_000):
        c.generate([("user", "go")], max_tokens=5000)
    assert seen == [e.text for e in events]
    assert len(batches) < len(events) / 10  # coalesced, not one signal per token
    assert order == [("finished", 3000, 3000)]
    assert not c.busy


def test_stop_ends_the_reply_within_a_token(qtbot, client):
    c = client(ScriptedLoader(tokens(*["x"] * 1000), delay=0.01))
    with qtbot.waitSignal(c.tokens, timeout=10_000):
        request = c.generate([("user", "go")], max_tokens=1000)
    with qtbot.waitSignal(c.finished, timeout=10_000) as done:
        c.stop()
    request_id, stats = done.args
    assert request_id == request
    assert stats.stop_reason == "cancelled"
    assert stats.tokens < 1000


def test_engine_errors_become_one_line_messages(qtbot, client):
    loader = ScriptedLoader(tokens("a", "b", "c", "d"))
    c = client(loader)
    loader.engine.error = ContextOverflowError("The prompt is 9000 tokens but the context holds 4096.")
    with qtbot.waitSignal(c.failed, timeout=10_000) as failed:
        c.generate([("user", "go")])
    assert failed.args[1] == "The prompt is 9000 tokens but the context holds 4096."

    loader.engine.error = RuntimeError("boom\nTraceback (most recent call last): ...")
    with qtbot.waitSignal(c.failed, timeout=10_000) as failed:
        c.generate([("user", "go")])
    assert failed.args[1] == "Unexpected error: RuntimeError: boom"


def test_a_failed_load_reports_its_reason_and_generation_says_no_model(qtbot):
    c = scripted_client(ScriptedLoader(load_error=ModelFileError("x.gguf: not a GGUF file")))
    try:
        with qtbot.waitSignal(c.load_failed, timeout=10_000) as failed:
            c.load(ModelSpec(target_path="x.gguf"))
        assert failed.args == ["x.gguf: not a GGUF file"]
        with qtbot.waitSignal(c.failed, timeout=10_000) as no_model:
            c.generate([("user", "hi")])
        assert "No model is loaded" in no_model.args[1]
    finally:
        c.shutdown()


def test_ensure_loaded_reloads_only_for_a_different_spec(qtbot, client):
    loader = ScriptedLoader()
    c = client(loader)
    assert not c.ensure_loaded(ModelSpec(target_path="scripted.gguf"))
    with qtbot.waitSignal(c.loaded, timeout=10_000):
        assert c.ensure_loaded(ModelSpec(target_path="scripted.gguf", n_ctx=2048))
    assert [s.n_ctx for s in loader.specs] == [4096, 2048]
    assert loader.models.closed  # the old pair was freed before the new load


def test_one_line_keeps_tandem_messages_and_shortens_others():
    assert one_line(ModelFileError("bad file")) == "bad file"
    assert one_line(ValueError("first\nsecond")) == "Unexpected error: ValueError: first"
    assert one_line(KeyError()) == "Unexpected error: KeyError"


def test_shutdown_stops_a_running_reply_and_joins_the_thread(qtbot, client):
    loader = ScriptedLoader(tokens(*["x"] * 10_000), delay=0.01)
    c = client(loader)
    with qtbot.waitSignal(c.tokens, timeout=10_000):
        c.generate([("user", "go")], max_tokens=10_000)
    link = c._link
    c.shutdown()
    assert not link._engine.is_alive()  # the host ended its loop: the reply was stopped ...
    assert loader.models.closed         # ... and the models freed
    assert not c.alive


def test_messages_that_cannot_cross_a_process_fail_on_the_thread_link_too(qtbot, client):
    """The thread link pickles as the process channel does: a reply whose stats carry
    something that does not pickle fails in one line, here as in the app, and the engine
    goes on answering."""
    loader = ScriptedLoader(tokens("a"))
    c = client(loader)
    original = loader.engine.generate

    def unpicklable(*args, **kwargs):
        generation = original(*args, **kwargs)
        generation.stats.lookahead_note = lambda: None  # a function does not pickle
        return generation

    loader.engine.generate = unpicklable
    with qtbot.waitSignal(c.failed, timeout=10_000) as failed:
        c.generate([("user", "go")])
    assert failed.args[1].startswith("The engine could not send its reply: ")
    loader.engine.generate = original
    with qtbot.waitSignal(c.finished, timeout=10_000):
        c.generate([("user", "again")])


def test_an_empty_target_provisions_the_demo_pair_with_progress(monkeypatch, tmp_path):
    from app.models import demo

    def fake_demo_pair(progress):
        progress("Downloading demo model", 25, 100)
        progress("Writing F32 copy of the demo model", 0, 0)
        return demo.DemoPair(tmp_path / "t.gguf", tmp_path / "d.gguf", tmp_path / "s.gguf")

    monkeypatch.setattr(demo, "demo_pair", fake_demo_pair)
    reports = []
    target, draft = loading.resolve_paths(ModelSpec(), lambda *report: reports.append(report))
    assert (target, draft) == (tmp_path / "t.gguf", tmp_path / "d.gguf")
    assert reports == [("Downloading demo model", 25, 100), ("Writing F32 copy of the demo model", 0, 0)]

    # A newer load makes the provisioning give up at its next progress report.
    with pytest.raises(loading.LoadCancelled):
        loading.resolve_paths(ModelSpec(), lambda *report: False)
    # A target of one's own never touches the demo pair.
    assert loading.resolve_paths(ModelSpec(target_path="/m/t.gguf"), lambda *a: True) == (Path("/m/t.gguf"), None)


def test_the_window_shows_load_progress_until_the_models_are_ready(make_window, qtbot):
    from app.storage.settings import Settings

    release = threading.Event()
    loader = ScriptedLoader()

    def slow_loader(spec, progress):
        progress("Downloading demo model", 0.4)
        release.wait(10)
        return loader(spec, progress)

    window = make_window(Settings(target_path="/m/t.gguf"), loader=slow_loader)
    banner = window.load_banner
    qtbot.waitUntil(lambda: banner.bar.value() == 400, timeout=10_000)
    assert banner.isVisible() and banner.label.text() == "Downloading demo model…"
    release.set()
    qtbot.waitUntil(lambda: not banner.isVisible(), timeout=10_000)
    assert window.model_label.text().startswith("scripted.gguf")
