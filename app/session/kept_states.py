"""Copies of the target's cache kept aside (``KeptStates``), and the one rule for when a
copy is worth keeping and when a kept one is put back.

The target's cache holds one sequence. Work that replaces it (another client's request,
another chat, a new load) throws away what was read, and a later prompt that starts
where it left off would read all of it again. A copy of the cache (a ``CacheImage``, from
a target whose ``keeps_states`` is True) kept aside and put back before such a prompt
saves that reading.

The rule, whatever the store:

- a state is kept only where at least ``MIN_TOKENS_SAVED`` tokens of the cache are about
  to be thrown away (``worth_keeping``): below that, reading them again costs less than
  the copy;
- of the kept states, the one sharing the longest prefix with the prompt is put back,
  and only where it holds at least ``MIN_TOKENS_SAVED`` more of the prompt than the cache
  does (``best``); the cache then holds the tokens the prompt shares, no more;
- a copy larger than the store's room or ``budget_bytes`` is not kept; past ``max_kept``
  states or ``budget_bytes`` together, the least recently used are let go (``keep``).
  The state about to be put back counts as used before the cache's own copy is kept,
  so that copy never lets it go.

Two stores follow it, each a subclass: the conversations of ``tandem serve``'s clients,
in system memory (``app/server/prompt_cache.py``), and each chat's state, on disk beside
the history (``app/session/chat_states.py``). A copy that fails or a state the target
refuses is said in one line and costs only the reading it would have saved.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Generic, Iterable, Sequence, TypeVar

from app.engine.backend import CacheImage, KeepsStates
from app.engine.tokens import common_prefix

log = logging.getLogger(__name__)

# Tokens a kept state must save reading, in both directions: kept only where at least this
# many would be thrown away, put back only where it saves reading at least this many.
MIN_TOKENS_SAVED = 256

Key = TypeVar("Key")
Packed = TypeVar("Packed")


def worth_keeping(thrown_away: int) -> bool:
    """Whether a cache about to lose ``thrown_away`` tokens is worth a copy."""
    return thrown_away >= MIN_TOKENS_SAVED


class KeptStates(ABC, Generic[Key, Packed]):
    """The rule over one store of kept states. A store names each state by a ``Key`` and
    holds it in its own form (``Packed``); the methods marked abstract are its."""

    def __init__(self, *, max_kept: int, budget_bytes: int) -> None:
        self.max_kept, self.budget_bytes = max_kept, budget_bytes
        self.stored = self.restored = 0  # states kept and put back, since it began

    # --- the rule -----------------------------------------------------------------------

    @staticmethod
    def best(held: Sequence[int], prompt: Sequence[int],
             candidates: Iterable[tuple[Key, Sequence[int]]]) -> tuple[Key | None, int]:
        """Of ``candidates`` (a key and its state's tokens), the one sharing the longest
        prefix with ``prompt``, and that prefix's length; (None, what ``held``, the cache,
        shares) where none saves reading ``MIN_TOKENS_SAVED`` tokens more."""
        here = common_prefix(held, prompt)
        best_key, there = None, here
        for key, tokens in candidates:
            shared = common_prefix(tokens, prompt)
            if shared > there:
                best_key, there = key, shared
        if best_key is None or there - here < MIN_TOKENS_SAVED:
            return None, here
        return best_key, there

    def keep(self, target: KeepsStates, key: Key) -> bool:
        """Copy the target's cache out and keep it as ``key`` (whatever ``key`` held goes),
        then let the least recently used go past the bounds. Never raises: False where it
        was not kept (the copy failed, or it does not fit)."""
        try:
            packed, size = self._pack(target.cache_image())
            if size > min(self.budget_bytes, self._room()):
                self._no_room(key, size)
                return False
            self._put(key, packed)
        except Exception as exc:  # noqa: BLE001 — not kept: it is read again, as without it
            self._not_kept(key, exc)
            return False
        self.stored += 1
        self._trim(newest=key)
        return True

    def put_back(self, target: KeepsStates, key: Key, image: CacheImage, shared: int) -> bool:
        """Make the target's cache ``image`` cut to its first ``shared`` tokens (the ones
        the prompt shares). Never raises: False where the target refused it, which the
        store then lets go (the prompt is read as without it)."""
        try:
            target.load_cache_image(image)
            if shared < len(image.tokens):
                target.trim(shared)  # exact on every memory (a recurrent one may read again)
        except Exception as exc:  # noqa: BLE001 — llama.cpp said no: the prompt is read instead
            self._refused(key, exc)
            return False
        self._touch(key)  # most recently used
        self.restored += 1
        return True

    def _trim(self, newest: Key) -> None:
        """Let go, least recently used first, of what is past ``max_kept`` states or
        ``budget_bytes`` together; never ``newest``, the state just kept."""
        sizes = self._by_recency()
        order = [newest] + [key for key in sizes if key != newest]
        total = 0
        for count, key in enumerate(order, start=1):
            total += sizes.get(key, 0)
            if key != newest and (count > self.max_kept or total > self.budget_bytes):
                self._drop(key)

    # --- the store's --------------------------------------------------------------------

    @abstractmethod
    def _pack(self, image: CacheImage) -> tuple[Packed, int]:
        """``image`` in the store's form, and the bytes that takes there."""

    @abstractmethod
    def _room(self) -> int:
        """The most bytes one state may take now (the machine's memory or disk)."""

    @abstractmethod
    def _put(self, key: Key, packed: Packed) -> None:
        """Keep ``packed`` as ``key``, the most recently used."""

    @abstractmethod
    def _by_recency(self) -> dict[Key, int]:
        """Every kept state's bytes, the most recently used first."""

    @abstractmethod
    def _touch(self, key: Key) -> None:
        """``key`` is the most recently used now."""

    @abstractmethod
    def _drop(self, key: Key) -> None:
        """Let ``key`` go."""

    @abstractmethod
    def _not_kept(self, key: Key, exc: Exception) -> None:
        """Say that ``key`` was not kept: its copy (or its write) failed."""

    def _no_room(self, key: Key, size: int) -> None:
        """``key``, of ``size`` bytes, was not kept: it does not fit (said or not)."""

    @abstractmethod
    def _refused(self, key: Key, exc: Exception) -> None:
        """The target refused ``key``'s state: say so, and let it go."""
