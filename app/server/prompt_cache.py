"""Conversations kept beside the one in the cache, so that clients taking turns each
find their own again (``tandem serve``).

The engine keeps whatever prefix of a new prompt the target's cache holds, which serves
one agent resending its growing history. Two clients taking turns (an agent and an
editor's completions, two agents) would each throw the other's conversation away, and a
3,600-token head was read again from the start: 17 s on a CPU where llama-server, which
keeps prompts in memory (``--cache-ram``), answered in half a second. Before a prompt
replaces much of what the cache holds, that cache is copied out (llama.cpp's sequence
state: ``save_cache``) and kept here; a later prompt that shares more with a kept one
than with the cache gets it put back (``restore_cache``) and reads only what it adds.

Bounded by bytes and by count (the least recently used goes first); a copy costs about
what llama.cpp's state takes (the KV cells of its tokens), in system memory.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable, Sequence

from app.engine.speculation.drafters import common_prefix
from app.system_memory import available_ram

log = logging.getLogger(__name__)

# The most bytes of kept caches (system memory), and the most caches. llama-server keeps 8 GiB.
# A copy is also never more than a quarter of the memory free when it is made.
BUDGET_BYTES = 4 << 30
MOST = 8
# A cache is kept only where a new prompt would throw away at least this many of its
# tokens, and put back only where it saves reading at least this many: below that,
# reading costs less than copying.
WORTH = 256


class PromptCache:
    """The kept caches of one target: ``before(target, prompt)`` before each reply."""

    def __init__(self, budget_bytes: int = BUDGET_BYTES, most: int = MOST,
                 free_memory: Callable[[], int] = available_ram) -> None:
        self.budget_bytes, self.most, self._free = budget_bytes, most, free_memory
        self._kept: OrderedDict[int, tuple[list[int], object]] = OrderedDict()  # oldest first
        self._next = 0
        self.restored = self.stored = 0  # copies put back and taken, since it began

    @property
    def held_bytes(self) -> int:
        return sum(_size(saved) for _tokens, saved in self._kept.values())

    def before(self, target, prompt: Sequence[int]) -> int:
        """Make the target's cache the one that shares most with ``prompt``, keeping the
        one it replaces where that is worth it. Returns the tokens of ``prompt`` the
        cache now holds. A failure to copy is logged and leaves the cache as it was (the
        prompt is then read as before)."""
        held = target.tokens
        here = common_prefix(held, prompt)
        best_key, there = None, here
        for key, (tokens, _saved) in self._kept.items():
            shared = common_prefix(tokens, prompt)
            if shared > there:
                best_key, there = key, shared
        if best_key is not None and there - here < WORTH:
            best_key, there = None, here
        if len(held) - here >= WORTH:
            self._keep(target)
        if best_key is not None:
            try:
                target.restore_cache(self._kept[best_key][1])
            except Exception as exc:  # noqa: BLE001 (llama.cpp said no: read the prompt instead)
                log.warning("a kept conversation could not be put back: %s", exc)
                del self._kept[best_key]
                return common_prefix(target.tokens, prompt)
            self._kept.move_to_end(best_key)  # still valid: most recently used now
            self.restored += 1
            return there
        return here

    def _keep(self, target) -> None:
        held = list(target.tokens)
        # A kept cache that is a prefix of this one says nothing this one does not.
        for key in [k for k, (tokens, _s) in self._kept.items() if common_prefix(tokens, held) == len(tokens)]:
            del self._kept[key]
        try:
            saved = target.save_cache()
        except Exception as exc:  # noqa: BLE001 (not kept: it would be read again, as before)
            log.warning("the conversation in the cache could not be kept: %s", exc)
            return
        if _size(saved) > min(self.budget_bytes, self._free() // 4):
            return  # (let go: it would crowd out what the machine needs)
        self._kept[self._next] = (held, saved)
        self._next += 1
        self.stored += 1
        while len(self._kept) > self.most or self.held_bytes > self.budget_bytes:
            self._kept.popitem(last=False)


def _size(saved) -> int:
    """Bytes of a ``save_cache`` copy: its state's length (the third field)."""
    return int(saved[2])
