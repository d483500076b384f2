"""A long prompt read with flash attention by a second context and moved into the decoding
one, which runs without it (app/backends/llama/flash_reader.py): the decoding context then
holds what it would have read itself, whatever comes next."""

from __future__ import annotations

import ctypes
import logging

import llama_cpp as ll
import numpy as np
import pytest

from app.backends.llama import flash_reader
from app.backends.llama.backend import LlamaBackend
from app.backends.llama.value_layout import transpose_values
from app.engine.gguf.context_shape import reads_apart

N_CTX = 2048
# Unquantised weights, read with and without flash attention: logits 0.01-0.03 apart.
CLOSE = 0.1


def _prompt(model: LlamaBackend, n: int) -> list[int]:
    """``n`` tokens of real prose and code (near-ties are rarer than in random tokens)."""
    import inspect

    text = inspect.getsource(inspect)
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    assert len(tokens) >= n
    return tokens[:n]


@pytest.fixture(scope="module")
def pair(demo_models):
    """The F32 demo target twice: as auto makes it (decodes without flash attention, reads
    long prompts with it) and with flash attention off (reads where it decodes)."""
    apart = LlamaBackend(demo_models.target, n_ctx=N_CTX, n_threads=0)
    here = LlamaBackend(demo_models.target, n_ctx=N_CTX, n_threads=0, flash_attention="off")
    assert apart.flash_attention is False and here.flash_attention is False
    yield apart, here
    apart.close()
    here.close()


def _read(model: LlamaBackend, tokens: list[int], piece: int | None = None) -> np.ndarray:
    """The engine's reading: all but the last token without logits (in pieces, as serve
    reads one), then the last with its row."""
    body = tokens[:-1]
    piece = piece or len(body)
    for start in range(0, len(body), piece):
        model.evaluate(body[start:start + piece], [])
    return model.evaluate(tokens[-1:], [0])[0]


def _cached(model: LlamaBackend) -> int:
    """Tokens the decoding context's own cache holds (not ``tokens``, which counts a reading apart)."""
    return ll.llama_memory_seq_pos_max(ll.llama_get_memory(model._ctx), 0) + 1


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert np.max(np.abs(a - b)) < CLOSE
    top = np.sort(b)[-2:]
    if top[1] - top[0] > 2 * CLOSE:  # a clear winner must win on both sides
        assert int(np.argmax(a)) == int(np.argmax(b))


def test_auto_reads_apart_only_where_it_decodes_without_flash_attention():
    assert reads_apart("auto", gpu=False, exact=False)
    assert not reads_apart("off", gpu=False, exact=False)  # asked for: no second context
    assert not reads_apart("on", gpu=False, exact=False)
    assert not reads_apart("auto", gpu=True, exact=False)  # llama.cpp's own choice on a GPU
    assert not reads_apart("auto", gpu=False, exact=True)  # decodes with it already
    assert not reads_apart("auto", gpu=False, exact=False, windowed=True)


def test_a_long_prompt_read_apart_continues_as_if_read_in_place(pair):
    apart, here = pair
    prompt = _prompt(apart, 1500)
    apart.trim(0), here.trim(0)
    before = apart.read_apart
    apart.evaluate(prompt[:-1], [])
    assert apart.tokens == prompt[:-1] and _cached(apart) == 0  # held by the reader so far
    last = apart.evaluate(prompt[-1:], [0])[0]
    assert apart.read_apart == before + len(prompt) - 1
    assert _cached(apart) == len(prompt)
    _same(last, _read(here, prompt))
    # Decoding goes on in the decoding context: a few greedy steps, and a batch of them.
    for _ in range(4):
        token = int(np.argmax(last))
        last = apart.evaluate([token], [0])[0]
        _same(last, here.evaluate([token], [0])[0])
    batch = prompt[100:108]
    _same(apart.evaluate(batch, [7])[0], here.evaluate(batch, [7])[0])
    assert apart.tokens == here.tokens and _cached(apart) == len(apart.tokens)


def test_a_prompt_read_in_pieces_stays_in_one_reader_and_equals_one_reading(pair):
    apart, _ = pair
    prompt = _prompt(apart, 1400)
    apart.trim(0)
    whole = _read(apart, prompt)
    apart.trim(0)
    assert np.array_equal(_read(apart, prompt, piece=512), whole)
    # A short follow-up on a long cache is read where it goes (the move would cost more).
    before = apart.read_apart
    apart.evaluate(prompt[:600], [])
    assert apart.read_apart == before and _cached(apart) == len(apart.tokens)


def test_a_cut_or_a_copy_while_the_reader_holds_the_prompt(pair):
    apart, here = pair
    prompt = _prompt(apart, 1200)
    here.trim(0)
    expected = _read(here, prompt)
    # A cut inside what the reader read: it moves first, then the cut.
    apart.trim(0)
    apart.evaluate(prompt[:-1], [])
    apart.trim(700)
    assert apart.tokens == prompt[:700] and _cached(apart) == 700
    _same(apart.evaluate(prompt[700:], [len(prompt) - 701])[0], expected)
    # A cut to before it: the reading is dropped, not moved.
    apart.trim(0)
    apart.evaluate(prompt[:-1], [])
    apart.trim(0)
    assert apart.tokens == [] and _cached(apart) == 0
    # A copy (serve pauses a long prompt for a short request): the reading moves, and back.
    apart.evaluate(prompt[:-1], [])
    saved = apart.cache_image()
    assert saved.tokens == prompt[:-1] and _cached(apart) == len(prompt) - 1
    apart.trim(0)
    apart.evaluate(prompt[:40], [])
    apart.load_cache_image(saved)
    _same(apart.evaluate(prompt[-1:], [0])[0], expected)


def test_a_state_that_does_not_move_is_read_in_place(demo_models, monkeypatch, caplog):
    """Where the reader's state cannot be transposed (another llama.cpp's layout, say), the
    tokens are read in the decoding context after all, and reading apart stops."""
    model = LlamaBackend(demo_models.target, n_ctx=N_CTX, n_threads=0)
    here = LlamaBackend(demo_models.target, n_ctx=N_CTX, n_threads=0, flash_attention="off")
    try:
        prompt = _prompt(model, 900)
        expected = _read(here, prompt)
        model.evaluate(prompt[:40], [])  # something held before: it stays, the rest is read again
        real = flash_reader.transpose_values
        # The way in works; the way back gives nothing.
        monkeypatch.setattr(flash_reader, "transpose_values", lambda state, transposed: None if transposed
                            else real(state, transposed))
        with caplog.at_level(logging.WARNING, logger="tandem.llama"):
            model.evaluate(prompt[40:-1], [])
            last = model.evaluate(prompt[-1:], [0])[0]
        assert "reading long prompts with flash attention is off" in caplog.text
        # Read in place in the same batches as the other: the very same logits.
        assert np.array_equal(last, expected)
        assert _cached(model) == len(prompt) == len(model.tokens)
        before = model.read_apart
        model.trim(0)
        model.evaluate(prompt[:-1], [])
        assert model.read_apart == before and _cached(model) == len(prompt) - 1
    finally:
        model.close()
        here.close()


def _state(model: LlamaBackend) -> np.ndarray:
    size = ll.llama_state_seq_get_size(model._ctx, 0)
    buf = np.empty(size, np.uint8)
    n = ll.llama_state_seq_get_data(model._ctx, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, 0)
    return buf[:n]


def _first_values(state: np.ndarray) -> int:
    """Where the first layer's values begin: after the cells, the flag and every layer's keys."""
    u32 = lambda at: int(state[at:at + 4].view(np.uint32)[0])  # noqa: E731
    cells, at = u32(12), 16
    for _ in range(cells):
        at += 8 + 4 * u32(at + 4)
    n_layer, at = u32(at + 4), at + 8
    for _ in range(n_layer):
        at += 12 + cells * int(state[at + 4:at + 12].view(np.uint64)[0])
    return at


def test_values_transposed_both_ways_come_back_as_they_were(pair):
    _, here = pair
    here.trim(0)
    here.evaluate(_prompt(here, 300), [])
    state = _state(here)
    original = state.copy()
    rows = transpose_values(state.copy(), transposed=False)  # (rewritten in place)
    assert rows is not None and len(rows) == len(state) and not np.array_equal(rows, state)
    assert np.array_equal(transpose_values(rows, transposed=True), original)
    # Already in the layout asked for, or not a state of this kind at all: None, and untouched.
    assert transpose_values(state, transposed=True) is None
    assert transpose_values(state[:-1], transposed=False) is None
    assert transpose_values(np.concatenate([state, state[:1]]), transposed=False) is None
    assert transpose_values(np.zeros(64, np.uint8), transposed=False) is None
    assert transpose_values(state.view(np.int8), transposed=False) is None
    assert np.array_equal(state, original)
    rng = np.random.default_rng(7)
    for size in (0, 3, 16, 100, 4096):
        assert transpose_values(rng.integers(0, 256, size, dtype=np.uint8), transposed=False) is None
    # A value type that is not single elements (a quantised cache), at the first layer's values.
    quantised = state.copy()
    first_values = _first_values(state)
    quantised[first_values:first_values + 4] = np.array([8], np.uint32).view(np.uint8)  # Q8_0
    assert transpose_values(quantised, transposed=False) is None
    assert transpose_values(state.copy(), transposed=False) is not None
    two_streams = state.copy()
    two_streams[8:12] = np.array([2], np.uint32).view(np.uint8)
    assert transpose_values(two_streams, transposed=False) is None



def test_no_second_context_where_the_memory_is_short(pair, monkeypatch):
    apart, _ = pair
    need = sum(size for _, part, size in apart.buffers if part in ("kv_cache", "compute"))
    assert need > 0  # llama.cpp said what it allocated
    prompt = _prompt(apart, 700)
    monkeypatch.setattr(flash_reader, "available_ram", lambda: 2 * need)
    apart.trim(0)
    before = apart.read_apart
    apart.evaluate(prompt, [])
    assert apart.read_apart == before and _cached(apart) == len(prompt)
    monkeypatch.setattr(flash_reader, "available_ram", lambda: 2 * need + 1)
    apart.trim(0)
    apart.evaluate(prompt, [])
    assert apart.read_apart == before + len(prompt)
    apart.trim(0)


def test_a_reply_after_a_prompt_read_apart_is_the_plain_one(pair, q41_draft):
    """Greedy, drafting or not, read whole or in pieces (serve's pauses, where another
    request takes the context in between): the same tokens, the prompt read apart each time."""
    from app.engine.speculation.drafters import ModelDrafter
    from app.engine.speculation.speculative import SpeculativeEngine
    from app.engine.types import SamplingConfig, SpecConfig

    apart, _ = pair
    prompt = _prompt(apart, 1300)
    apart.trim(0)
    before = apart.read_apart
    plain = [e.id for e in SpeculativeEngine(apart).generate(prompt, SamplingConfig(), SpecConfig(enabled=False),
                                                             24).run()]
    assert apart.read_apart > before
    pauses = []

    def pause():  # another client's request: the cache is copied out, used, put back
        saved = apart.cache_image()
        apart.trim(0)
        apart.evaluate(prompt[:30], [0])
        apart.load_cache_image(saved)
        pauses.append(len(saved.tokens))

    for kwargs in ({}, {"pause": pause}):
        apart.trim(0)
        before = apart.read_apart
        drafter = ModelDrafter(q41_draft, apart.n_vocab, eog_ids=apart.eog_ids)
        generation = SpeculativeEngine(apart, drafter).generate(prompt, SamplingConfig(), SpecConfig(draft_max=4),
                                                                24, **kwargs)
        assert [e.id for e in generation.run()] == plain
        assert generation.stats.drafted > 0 and apart.read_apart > before
    assert pauses  # the pieces were read apart and moved at each pause
