"""A reply that ends part-way through a UTF-8 character keeps that character's bytes.

The streaming detokenizer holds incomplete characters back until the token that
completes them; when the reply ends first, what it holds must still reach the
reply (as U+FFFD), or the last character silently disappears.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.speculation.drafters import ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig, StopReason

from markov_backend import MarkovBackend

# 日 is E6 97 A5: three byte tokens, then a plain "a"; token 4 ends the turn.
BYTES = {0: b"\xe6", 1: b"\x97", 2: b"\xa5", 3: b"a", 4: b""}
END = 4


class ByteTokens(MarkovBackend):
    def token_bytes(self, token_id: int) -> bytes:
        return BYTES[token_id]


def _chain(*pairs: tuple[int, int]) -> np.ndarray:
    """A greedy chain: each (token, next) pair is the sure continuation."""
    table = np.zeros((5, 5))
    for token, following in pairs:
        table[token, following] = 10.0
    return table


CYCLE = _chain((3, 0), (0, 1), (1, 2), (2, 3))  # a 日 a 日 ...


def _engines(table: np.ndarray, eog: frozenset[int] = frozenset()):
    def model() -> ByteTokens:
        backend = ByteTokens(table, n_ctx=64)
        backend.eog_ids = eog
        return backend

    plain = SpeculativeEngine(model())
    speculative = SpeculativeEngine(model(), ModelDrafter(model(), 5, eog_ids=eog))
    return [(plain, SpecConfig(enabled=False)), (speculative, SpecConfig(draft_max=3))]


@pytest.mark.parametrize("which", ["plain", "speculative"])
def test_a_reply_cut_off_by_its_length_mid_character_ends_with_a_replacement(which):
    engine, spec = dict(zip(["plain", "speculative"], _engines(CYCLE)))[which]
    generation = engine.generate([3], SamplingConfig(), spec, max_tokens=6)  # 0 1 2 3 0 1
    events = generation.run()
    assert [e.id for e in events] == [0, 1, 2, 3, 0, 1]
    # The first 日 arrives whole with its last byte; the second is cut short after two.
    assert [e.text for e in events] == ["", "", "日", "a", "", "\ufffd"]
    assert generation.stats.stop_reason is StopReason.MAX_TOKENS and generation.stats.tokens == 6


@pytest.mark.parametrize("which", ["plain", "speculative"])
def test_a_reply_whose_turn_ends_mid_character_keeps_the_bytes_it_had(which):
    table = _chain((3, 0), (0, 1), (1, END))  # E6 97, then the end of the turn
    engine, spec = dict(zip(["plain", "speculative"], _engines(table, frozenset({END}))))[which]
    generation = engine.generate([3], SamplingConfig(), spec, max_tokens=20)
    events = generation.run()
    assert [e.id for e in events] == [0, 1]
    assert "".join(e.text for e in events) == "\ufffd"
    assert generation.stats.stop_reason is StopReason.EOS


def test_whole_characters_are_never_held_back():
    """Only an event that leaves part of a character pending waits for the next one."""
    engine, spec = _engines(_chain((3, 3)))[0]  # "a" forever
    events = iter(engine.generate([3], SamplingConfig(), spec, max_tokens=50))
    first = next(events)
    assert first.text == "a"  # delivered at once, not one token late
    assert all(e.text == "a" for e in events)
