"""The engine host on a thread behind the link a front end uses for an engine process
(``app/enginehost/thread_link.py``): the same messages, pickled on their way; a clean
close reports no death, and an end the front end did not ask for reports one."""

from __future__ import annotations

import queue
import threading

import pytest

from app.enginehost.thread_link import ENDED, ThreadLink, channel_pair
from app.session import protocol as p
from app.session.config import ModelSpec

from bridge.fakes import ScriptedLoader, tokens

WAIT_S = 30.0  # a hang guard: every answer here comes at once


class Front:
    """What a front end's reader would get: messages and deaths, in order."""

    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.deaths: list[str] = []

    def link(self, loader) -> ThreadLink:
        link = ThreadLink(self.messages.put, self.deaths.append, loader=loader)
        link.start()
        return link

    def next(self, kind):
        while True:
            message = self.messages.get(timeout=WAIT_S)
            if isinstance(message, kind):
                return message


def test_the_channel_copies_what_it_carries_and_ends_with_end_of_file():
    here, there = channel_pair()
    sent = {"events": [1, 2]}
    here.send(sent)
    received = there.recv()
    assert received == sent and received is not sent  # pickled, as a process's channel does
    here.close()
    with pytest.raises(EOFError):
        there.recv()
    with pytest.raises(EOFError):
        there.recv()  # and every later recv
    with pytest.raises(OSError):
        here.send("after close")


def test_a_reply_streams_over_the_link_and_close_ends_the_engine_without_a_death():
    front = Front()
    loader = ScriptedLoader(tokens("a", "b", "c"))
    link = front.link(loader)
    assert isinstance(front.next(p.Ready), p.Ready)
    link.send(p.Load(1, ModelSpec(target_path="scripted.gguf")))
    assert front.next(p.Loaded).load_id == 1
    link.send(p.Generate(7, (("user", "go"),)))
    finished = front.next(p.Finished)
    assert finished.request_id == 7 and finished.stats.tokens == 3
    link.close()
    assert not link._engine.is_alive() and loader.models.closed
    assert front.deaths == []


def test_an_engine_that_ends_unasked_is_a_death():
    front = Front()
    link = front.link(ScriptedLoader())
    front.next(p.Ready)
    ended = threading.Event()
    original = link._on_death
    link._on_death = lambda line: (original(line), ended.set())
    link._channel._outbox.put(p.Shutdown())  # the engine ends, though the front end asked nothing
    assert ended.wait(WAIT_S)
    assert front.deaths == [ENDED]
    link.close()  # after a death, closing is quiet
    assert front.deaths == [ENDED]


def test_kill_lets_the_thread_go_and_reports_the_death_a_killed_process_would():
    front = Front()
    link = front.link(ScriptedLoader(tokens(*["x"] * 10_000), delay=0.01))
    front.next(p.Ready)
    link.send(p.Load(1, ModelSpec(target_path="scripted.gguf")))
    front.next(p.Loaded)
    link.send(p.Generate(1, (("user", "go"),), max_tokens=10_000))
    front.next(p.Tokens)
    link.kill()
    assert front.deaths == [ENDED]
    link._engine.join(WAIT_S)
    assert not link._engine.is_alive()  # it ended after its current task
