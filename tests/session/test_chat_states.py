"""A chat's cache kept on disk (app/session/chat_states.py), through real engine processes
on the demo pair: a reopened chat puts its saved state back and reads only what it
adds, and answers exactly as an engine that re-reads the whole history; a stale,
foreign or damaged file is ignored with one line, and the history is read instead."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from app.engine.types import SamplingConfig, SpecConfig
from app.session import chat_states
from app.session.chat_states import MAGIC, ChatStates, read_state
from app.session.kept_states import MIN_TOKENS_SAVED
from app.session.config import ModelSpec
from app.session.engine_link import engine_log
from app.session.engine_session import EngineSession

from rpc_workers import tandem_env

GREEDY = SamplingConfig(temperature=0.0)
SPEC = SpecConfig(draft_max=4)
# A system prompt long enough that the chat's cache is worth keeping (>= MIN_TOKENS_SAVED tokens).
SYSTEM = " ".join(f"Rule {i}: answer briefly and name the rule you followed when it applies." for i in range(40))
FIRST = (("user", "What is a linked list?"),)
OTHER = (("user", "Name three colours."),)


def _engine(demo_models, home: Path, n_ctx: int = 2048) -> EngineSession:
    engine = EngineSession(env=tandem_env(TANDEM_HOME=str(home)))
    engine.load(ModelSpec(target_path=str(demo_models.target), draft_path=str(demo_models.draft),
                          n_ctx=n_ctx, n_threads=1))
    return engine


def _reply(engine: EngineSession, history, chat: int | None) -> str:
    text = "".join(e.text for e in engine.reply(history, GREEDY, SPEC, 24, system_prompt=SYSTEM, chat=chat))
    return text


def _state(home: Path, chat: int) -> Path:
    return home / "data" / "chat-states" / f"{chat}.state"


class _Log:
    """What engines started from here write to their log (engine.log) from now on."""

    def __init__(self) -> None:
        self.path = engine_log()
        self.start = self.path.stat().st_size if self.path.exists() else 0

    def text(self) -> str:
        if not self.path.exists():
            return ""
        with open(self.path, "rb") as f:
            f.seek(self.start)
            return f.read().decode(errors="replace")


@pytest.fixture(scope="module")
def conversation(demo_models, tmp_path_factory):
    """Chat 1 answered, then chat 2 (which writes chat 1's state), then the engine closed
    (which writes chat 2's). Returns the home, chat 1's saved file, and its first reply."""
    home = tmp_path_factory.mktemp("home")
    engine = _engine(demo_models, home)
    try:
        first = _reply(engine, FIRST, 1)
        assert not _state(home, 1).exists()  # still in the cache: nothing written yet
        _reply(engine, OTHER, 2)
        assert _state(home, 1).exists()      # another chat took the cache: chat 1 went to disk
    finally:
        engine.close()
    assert _state(home, 2).exists()          # the engine's end wrote the chat it held
    return home, _state(home, 1).read_bytes(), first


def _follow_up(first: str) -> tuple:
    return FIRST + (("assistant", first), ("user", "And a doubly linked one?"))


def _reopened(demo_models, home: Path, history, chat: int | None):
    engine = _engine(demo_models, home)
    try:
        text = _reply(engine, history, chat)
        return text, engine.stats
    finally:
        engine.close()


@pytest.mark.parametrize("edited", [False, True])
def test_a_reopened_chat_reads_only_what_it_adds_and_answers_as_a_re_read(demo_models, conversation, tmp_path,
                                                                         edited):
    """``edited``: the reply was changed on screen since (its last words): the saved
    state counts up to where the chat's text still says the same."""
    _home, saved, first = conversation
    if edited:
        first = first.rsplit(" ", 3)[0] + " and so on."
    follow_up = _follow_up(first)
    mine = tmp_path / "home"
    _state(mine, 1).parent.mkdir(parents=True)
    _state(mine, 1).write_bytes(saved)
    log = _Log()
    restored, stats = _reopened(demo_models, mine, follow_up, 1)
    assert "saved state" not in log.text()
    re_read, full = _reopened(demo_models, tmp_path / "fresh", follow_up, None)
    assert not (tmp_path / "fresh" / "data" / "chat-states").exists()  # no chat: nothing kept
    assert restored == re_read and restored
    assert full.prompt_eval_tokens == full.prompt_tokens > MIN_TOKENS_SAVED  # the fresh engine read it all
    assert stats.prompt_tokens == full.prompt_tokens
    assert stats.prompt_eval_tokens < 40, stats  # only what changed, the new turn (and the reply's last token)


def _ignored_once(log: _Log, why: str) -> None:
    lines = [line for line in log.text().splitlines() if "saved state of chat 1 is ignored" in line]
    assert len(lines) == 1 and why in lines[0], log.text()[-3000:]


@pytest.fixture(scope="module")
def re_read(demo_models, conversation, tmp_path_factory):
    """The follow-up answered by an engine with nothing saved: what every reopening must equal."""
    return _reopened(demo_models, tmp_path_factory.mktemp("fresh"), _follow_up(conversation[2]), None)[0]


def test_a_saved_state_from_another_context_is_ignored_with_one_line(demo_models, conversation, re_read, tmp_path):
    _home, saved, first = conversation
    follow_up = _follow_up(first)
    mine = tmp_path / "home"
    _state(mine, 1).parent.mkdir(parents=True)
    _state(mine, 1).write_bytes(saved)
    log = _Log()
    engine = _engine(demo_models, mine, n_ctx=1024)  # another context size: the state does not fit
    try:
        text, stats = _reply(engine, follow_up, 1), engine.stats
    finally:
        engine.close()
    assert text == re_read
    assert stats.prompt_eval_tokens == stats.prompt_tokens  # read again, whole
    _ignored_once(log, "another model, context")
    assert not _state(mine, 1).exists() or _state(mine, 1).read_bytes() != saved


def _damaged(data: bytes, damage: str) -> bytes:
    start = len(MAGIC) + 8
    (n,) = struct.unpack("<Q", data[len(MAGIC):start])
    header, body = json.loads(data[start:start + n]), data[start + n:]
    if damage == "edited":  # the chat was edited since: the saved tokens are not the prompt's start
        header["tokens"][7] = header["tokens"][7] + 1
    elif damage == "bytes":
        body = body[:100] + bytes([body[100] ^ 0xFF]) + body[101:]
    elif damage == "garbage":  # a whole, well-signed file whose state is noise: llama.cpp must refuse it
        body = bytes((i * 7919 + 13) % 251 for i in range(len(body)))
        header["sha256"] = hashlib.sha256(body).hexdigest()
    raw = json.dumps(header).encode()
    data = MAGIC + struct.pack("<Q", len(raw)) + raw + body
    return {"cut": data[:-1000], "magic": b"X" + data[1:], "empty": b""}.get(damage, data)


@pytest.mark.parametrize("damage, why", [
    ("edited", "the chat changed"), ("bytes", "damaged"), ("garbage", "llama.cpp refused"),
    ("cut", "cut short"), ("magic", "not a saved state"), ("empty", "not a saved state")])
def test_a_damaged_or_outdated_state_is_ignored_with_one_line(demo_models, conversation, re_read, tmp_path,
                                                              damage, why):
    _home, saved, first = conversation
    follow_up = _follow_up(first)
    mine = tmp_path / "home"
    _state(mine, 1).parent.mkdir(parents=True)
    _state(mine, 1).write_bytes(_damaged(saved, damage))
    log = _Log()
    text, stats = _reopened(demo_models, mine, follow_up, 1)
    assert text == re_read
    assert stats.prompt_eval_tokens == stats.prompt_tokens
    _ignored_once(log, why)


def test_states_are_bounded_and_a_deleted_chat_leaves_none(tmp_path):
    """The files' own rules, without a model: the least recently used go past MAX_KEPT, and
    ``prune`` / ``forget`` remove what the history no longer has."""
    import os

    folder = tmp_path / "states"
    folder.mkdir()
    for chat in range(5):
        path = folder / f"{chat}.state"
        path.write_bytes(b"x" * 10)
        os.utime(path, (1000 + chat, 1000 + chat))
    states = ChatStates(folder, max_kept=3)
    states._trim(newest=folder / "0.state")
    assert sorted(p.name for p in folder.iterdir()) == ["0.state", "3.state", "4.state"]
    (folder / "notes.state").write_bytes(b"?")
    chat_states.prune(folder, {3})
    assert sorted(p.name for p in folder.iterdir()) == ["3.state"]
    chat_states.forget(folder, 3)
    assert not any(folder.iterdir())
