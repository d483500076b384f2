"""One rule for the target's kept states (app/session/kept_states.py), followed alike by
its two stores: the served conversations in memory (app/server/prompt_cache.py) and each
chat's state on disk (app/session/chat_states.py). Each test runs on both, on the demo
target, as the engine uses them: a store's ``before`` the reply, then the prompt read
from what the cache shares."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.engine.tokens import common_prefix
from app.server.prompt_cache import PromptCache
from app.session.chat_states import ChatStates
from app.session.kept_states import MIN_TOKENS_SAVED

from markov_backend import MarkovBackend


class _Memory:
    """The served conversations: a conversation is found by its tokens, not its name."""

    def __init__(self, folder: Path, max_kept: int) -> None:
        self.states = PromptCache(max_kept=max_kept)

    def before(self, target, chat: int, prompt: list[int]) -> None:
        self.states.before(target, prompt)

    def kept(self) -> int:
        return len(self.states._kept)


class _Disk:
    """The chats' states: a conversation is found by its chat."""

    def __init__(self, folder: Path, max_kept: int) -> None:
        self.folder = folder
        self.states = ChatStates(folder, max_kept=max_kept)

    def before(self, target, chat: int, prompt: list[int]) -> None:
        self.states.before(target, chat, prompt)

    def kept(self) -> int:
        return len(list(self.folder.glob("*.state")))


@pytest.fixture(params=[_Memory, _Disk], ids=["memory", "disk"])
def store(request, tmp_path):
    return lambda max_kept=2: request.param(tmp_path / "states", max_kept)


def _conversation(c: int, n: int = MIN_TOKENS_SAVED + 40) -> list[int]:
    return [100 + 7 * c + i % 50 for i in range(n)]


def _read(target, prompt: list[int]) -> int:
    """What the engine's prefill does after ``before``: keep what the cache shares with
    ``prompt`` (short of its last token, whose logits the reply needs), read the rest.
    Returns the tokens read."""
    reuse = min(common_prefix(target.tokens, prompt), len(prompt) - 1)
    target.trim(reuse)
    target.evaluate(prompt[reuse:], [])
    return len(prompt) - reuse


def _turn(store, target, chat: int, prompt: list[int]) -> int:
    store.before(target, chat, prompt)
    return _read(target, prompt)


def test_the_state_a_prompt_needs_comes_back_and_the_least_recently_used_goes(store, q41_target):
    """At most ``max_kept``: the state about to be put back is never the one let go for
    the copy of the cache taken just before it (the least recently used other one is)."""
    store = store(max_kept=2)
    q41_target.trim(0)
    a, b, c = (_conversation(i) for i in range(3))
    for chat, conversation in enumerate((a, b, c)):
        assert _turn(store, q41_target, chat, conversation) == len(conversation)  # nothing kept matches
    assert store.states.stored == 2 and store.kept() == 2  # a and b; c is in the cache
    # a, the least recently used, comes back: only its new turn is read. c is kept as it
    # goes, and b, now the least recently used, is let go.
    assert _turn(store, q41_target, 0, a + [5, 6, 7]) == 3
    assert store.states.restored == 1 and store.kept() == 2
    assert _turn(store, q41_target, 1, b + [5, 6, 7]) == len(b) + 3  # let go: read again
    assert _turn(store, q41_target, 2, c + [5, 6, 7]) == 3  # c was kept
    assert store.states.restored == 2
    q41_target.trim(0)


@pytest.mark.parametrize("shared", [MIN_TOKENS_SAVED - 1, MIN_TOKENS_SAVED])
def test_a_state_is_put_back_only_where_it_saves_reading_min_tokens_saved(store, q41_target, shared):
    store = store()
    q41_target.trim(0)
    a, b = _conversation(0), _conversation(1)
    _turn(store, q41_target, 0, a)
    _turn(store, q41_target, 1, b)  # a is kept
    edited = a[:shared] + [9] * 20  # a's chat, changed after its first ``shared`` tokens
    read = _turn(store, q41_target, 0, edited)
    if shared < MIN_TOKENS_SAVED:
        assert read == len(edited) and store.states.restored == 0
    else:
        assert read == len(edited) - shared and store.states.restored == 1
    q41_target.trim(0)


def test_a_state_too_large_for_the_budget_is_not_kept(store, q41_target):
    store = store()
    store.states.budget_bytes = 1
    q41_target.trim(0)
    _turn(store, q41_target, 0, _conversation(0))
    _turn(store, q41_target, 1, _conversation(1))
    assert store.states.stored == 0 and store.kept() == 0
    q41_target.trim(0)


def test_a_target_that_keeps_no_states_is_left_alone(store):
    """``keeps_states`` False (app/engine/backend.py): no copy is asked of it."""
    store = store()
    target = MarkovBackend(np.zeros((400, 400), dtype=np.float32), n_ctx=2 * MIN_TOKENS_SAVED + 100)
    for chat in range(3):
        conversation = [t % 400 for t in _conversation(chat)]
        assert _turn(store, target, chat, conversation) == len(conversation)
    assert store.states.stored == 0 and store.kept() == 0
