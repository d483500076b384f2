"""The conversations of ``tandem serve``'s clients, kept in system memory so that clients
taking turns (an agent and an editor's completions, two agents) each find their own
again and read only what they add.

The engine keeps whatever prefix of a new prompt the target's cache holds, which serves
one client resending its growing history; a client whose prompt replaces another's
conversation would throw that one away. Before such a prompt, the cache is copied out
and kept here, and a later prompt that shares more with a kept conversation than with
the cache gets it put back: the rule of ``app/session/kept_states.py`` (at least
``MIN_TOKENS_SAVED`` tokens either way), over states named by a number. Bounded by
``MAX_KEPT`` states and ``BUDGET_BYTES`` together, the least recently used let go first;
a copy also never takes more than a quarter of the memory free when it is made (its
size is llama.cpp's state: the KV cells of its tokens).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable, Sequence

from app.engine.backend import CacheImage, KeepsStates
from app.engine.tokens import common_prefix
from app.session.kept_states import KeptStates, worth_keeping
from app.system_memory import available_ram

log = logging.getLogger(__name__)

BUDGET_BYTES = 4 << 30  # the kept conversations' states together, in system memory
MAX_KEPT = 8            # conversations kept at most


class PromptCache(KeptStates[int, CacheImage]):
    """The kept conversations of one target: ``before(target, prompt)`` before each reply."""

    def __init__(self, budget_bytes: int = BUDGET_BYTES, max_kept: int = MAX_KEPT,
                 free_memory: Callable[[], int] = available_ram) -> None:
        super().__init__(max_kept=max_kept, budget_bytes=budget_bytes)
        self._free = free_memory
        self._kept: OrderedDict[int, CacheImage] = OrderedDict()  # least recently used first
        self._next = 0

    @property
    def held_bytes(self) -> int:
        return sum(len(image.state) for image in self._kept.values())

    def before(self, target: KeepsStates, prompt: Sequence[int]) -> int:
        """Make the target's cache the one that shares most with ``prompt``, keeping the
        one it replaces where that is worth it. Returns the tokens of ``prompt`` the
        cache now holds. A failure to copy is logged and leaves the cache as it was (the
        prompt is then read as before)."""
        held = target.tokens
        if not target.keeps_states:
            return common_prefix(held, prompt)
        key, there = self.best(held, prompt, ((k, image.tokens) for k, image in self._kept.items()))
        chosen = None
        if key is not None:
            chosen = self._kept[key]
            self._touch(key)  # in use: the copy below lets others go first
        if worth_keeping(len(held) - common_prefix(held, prompt)):
            self._keep_held(target)
        if key is not None and not self.put_back(target, key, chosen, there):
            return common_prefix(target.tokens, prompt)
        return there

    def _keep_held(self, target: KeepsStates) -> None:
        held = target.tokens
        # A kept conversation that is a prefix of this one says nothing this one does not.
        for key in [k for k, image in self._kept.items() if common_prefix(image.tokens, held) == len(image.tokens)]:
            del self._kept[key]
        key, self._next = self._next, self._next + 1
        self.keep(target, key)

    # --- the store (KeptStates) ------------------------------------------------------------

    def _pack(self, image: CacheImage) -> tuple[CacheImage, int]:
        return image, len(image.state)

    def _room(self) -> int:
        return self._free() // 4  # (more would crowd out what the machine needs)

    def _put(self, key: int, image: CacheImage) -> None:
        self._kept[key] = image

    def _by_recency(self) -> dict[int, int]:
        return {key: len(image.state) for key, image in reversed(self._kept.items())}

    def _touch(self, key: int) -> None:
        if key in self._kept:
            self._kept.move_to_end(key)

    def _drop(self, key: int) -> None:
        self._kept.pop(key, None)

    def _not_kept(self, key: int, exc: Exception) -> None:
        log.warning("the conversation in the cache could not be kept: %s", exc)

    def _refused(self, key: int, exc: Exception) -> None:
        log.warning("a kept conversation could not be put back: %s", exc)
        self._kept.pop(key, None)
