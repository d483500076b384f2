"""What the engine may copy from beyond the reply's own context: the text a regeneration
replaces, the user's other chats. ``LookupDrafter`` looks here after the context.

Copying repeats (``SpecConfig.copy_min``, ``COPY_MIN`` = 6 tokens when the user's "copy
repeated text" is on) looks past the context at the token sequences the session
collects: the reply a regeneration replaces (``ChatSession.reply(replaced=[old])``) and
whatever a front end hands ``ChatSession.remember(texts)`` (earlier branches of an
edited message, the user's other chats). They sit in one n-gram index, bounded
(``app/session/chat.py`` gives ``COPY_SOURCE_TOKENS`` = 200,000 tokens; the oldest go
first). Of a match in the context and one in the sources, the copy follows the one whose
match reaches further back (``LookupDrafter.copy``, up to ``REACH_MOST`` tokens); a tie
goes to the context, the conversation at hand. Where the two say different things, the
other is a second copy a token tree may verify beside the first (``tree_round.py``).

A copy costs no draft steps, so it is tried even in a round the policy plans as a plain
step, and it is verified like any guess (one-hot q when sampled): lossless.
"""

from __future__ import annotations

import threading
from typing import Sequence


class CopySources:
    """Token sequences to copy from beyond the current context, indexed by their n-grams.

    ``add`` a sequence (most relevant last: of equal matches the latest added wins);
    ``find`` the latest occurrence of the context's last ``n`` tokens. Bounded: past
    ``max_tokens`` the oldest sequences go (down to three quarters of the bound, so
    the index is rebuilt now and then rather than on every add). The index keys are
    hashes of n-grams and every hit is checked against its tokens, so a collision can
    hide an occurrence but never propose a wrong one. Adding and finding may happen
    on different threads.
    """

    def __init__(self, n: int, max_tokens: int = 200_000) -> None:
        if n < 1:
            raise ValueError("a copy source needs n-grams of at least one token")
        self.n = n
        self.max_tokens = max(max_tokens, n + 1)
        self._lock = threading.Lock()
        self._sources: dict[int, list[int]] = {}   # insertion order is age
        self._next_id = 0
        self._tokens = 0
        self._index: dict[int, int] = {}           # hash of n tokens -> source id << 32 | position after them

    def __len__(self) -> int:
        """Tokens held."""
        return self._tokens

    @property
    def sources(self) -> int:
        return len(self._sources)

    def add(self, tokens: Sequence[int]) -> None:
        tokens = list(tokens)[-self.max_tokens:]
        if len(tokens) <= self.n:
            return  # nothing could follow a match
        with self._lock:
            source_id, self._next_id = self._next_id, self._next_id + 1
            self._sources[source_id] = tokens
            self._tokens += len(tokens)
            if self._tokens > self.max_tokens:
                self._evict(keep=self.max_tokens * 3 // 4)
            else:
                self._index_one(source_id, tokens)

    def clear(self) -> None:
        with self._lock:
            self._sources.clear()
            self._index.clear()
            self._tokens = 0

    def find(self, context: Sequence[int]) -> tuple[list[int], int] | None:
        """(source, start): ``source[start:]`` followed the latest occurrence of the
        context's last ``n`` tokens; None when they occur nowhere."""
        n = self.n
        if len(context) < n:
            return None
        tail = list(context[-n:])
        with self._lock:
            hit = self._index.get(hash(tuple(tail)))
            if hit is None:
                return None
            source = self._sources.get(hit >> 32)
        start = hit & 0xFFFFFFFF
        if source is None or source[start - n:start] != tail:
            return None
        return source, start

    def _index_one(self, source_id: int, tokens: list[int]) -> None:
        n, index, tag = self.n, self._index, source_id << 32
        # Only positions with a token after them: a match must have something to copy.
        for i in range(n, len(tokens)):
            index[hash(tuple(tokens[i - n:i]))] = tag | i

    def _evict(self, keep: int) -> None:
        """Drop the oldest sources (never the newest) until at most ``keep`` tokens stay; rebuild."""
        while self._tokens > keep and len(self._sources) > 1:
            oldest = next(iter(self._sources))
            self._tokens -= len(self._sources.pop(oldest))
        self._index.clear()
        for source_id, tokens in self._sources.items():
            self._index_one(source_id, tokens)
