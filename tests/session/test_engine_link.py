"""The engine process's channel without a window: the messages, the words for a death, and a
link whose child dies before it ever connects."""

from __future__ import annotations

import pickle
import signal
import sys
import threading

from app.engine.types import SamplingConfig, SpecConfig, Stats, TokenEvent, TokenKind
from app.session import engine_link, protocol as p
from app.session.chat import LoadInfo
from app.session.config import ModelSpec
from app.session.engine_death import death_line


def event(n: int) -> TokenEvent:
    return TokenEvent(n, f"t{n}", TokenKind.ACCEPTED)


def test_every_message_crosses_a_pickle_intact():
    info = LoadInfo(target_name="t.gguf", target_path="/m/t.gguf")
    messages = [p.Load(1, ModelSpec(target_path="/m/t.gguf")),
                p.Generate(2, (("user", "hi"),), "sys", SamplingConfig(temperature=0.5), SpecConfig(draft_max="auto"), 9),
                p.Stop(), p.Check(), p.Ping(3), p.Serve("127.0.0.1", 0, SamplingConfig(), SpecConfig(), 4096),
                p.StopServing(), p.Shutdown(), p.Ready(7), p.LoadProgress(1, "Loading target model", 0.5),
                p.Loaded(1, info), p.LoadFailed(1, "bad"), p.Tokens(2, [event(0)], Stats(tokens=1)),
                p.Finished(2, Stats(tokens=1, stop_reason="eos")), p.Failed(2, "no"), p.Checked("none"),
                p.Pong(3, 0.5), p.Serving(url="http://127.0.0.1:1/v1"), p.Served({"id": "x"})]
    for message in messages:
        assert pickle.loads(pickle.dumps(message)) == message


def test_a_replys_batches_merge_in_order_and_keep_the_newest_stats():
    first, later = Stats(tokens=1), Stats(tokens=3)
    merged = p.merge_tokens([p.Tokens(1, [event(0)], first), p.Tokens(1, [event(1)], None),
                             p.Tokens(1, [event(2)], later), p.Finished(1, later),
                             p.Tokens(2, [event(0)]), p.Tokens(3, [event(0)])])
    assert [type(m).__name__ for m in merged] == ["Tokens", "Finished", "Tokens", "Tokens"]
    assert [e.id for e in merged[0].events] == [0, 1, 2] and merged[0].stats is later
    assert [m.request_id for m in merged[2:]] == [2, 3]


def test_a_death_in_one_line():
    abort = ["llama_decode: something", "/src/ggml/src/ggml.c:1234: GGML_ASSERT(n > 0) failed", "#0 0x1 in ?"]
    assert death_line(-signal.SIGABRT, abort) == "The engine crashed (SIGABRT: ggml.c:1234: GGML_ASSERT(n > 0) failed)"
    assert death_line(-signal.SIGKILL, []) == "The engine crashed (SIGKILL)"
    assert death_line(-signal.SIGKILL, [], oom=True) == "The engine ran out of memory: the system ended it (SIGKILL)"
    assert death_line(-signal.SIGKILL, [], ended_here=True) == "The engine was ended from here"
    assert death_line(1, ["Traceback", "ValueError: x"]) == "The engine exited with code 1: llama.cpp said: ValueError: x"


def test_a_child_that_dies_before_it_connects_is_a_death_not_a_hang(monkeypatch, tmp_path):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    monkeypatch.setattr(engine_link, "engine_command",
                        lambda address: [sys.executable, "-c", "import sys; print('no luck', file=sys.stderr); sys.exit(3)"])
    deaths: list[str] = []
    dead = threading.Event()
    link = engine_link.EngineLink(lambda message: None, lambda line: (deaths.append(line), dead.set()))
    link.start()
    link.send(p.Load(1, ModelSpec()))  # waits for a connection that never comes, and is dropped
    assert dead.wait(60)
    assert deaths == ["The engine exited with code 3: llama.cpp said: no luck"]
    assert not link.alive
    link.close()  # nothing left to end; no second report
    assert len(deaths) == 1
