"""``peak``: a greedy draft step's argmax, confidence and runner-up from one pass over
the row, against the full softmax, on rows built to break it."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.speculation.peak import BAND, peak
from app.engine.speculation.row_grid import RowGrid
from app.engine.speculation.sampling import top_n


def exact(logits: np.ndarray) -> tuple[int, float, int | None]:
    x = logits.astype(np.float64)
    token = int(np.argmax(x))
    if not np.isfinite(x[token]):
        return token, 0.0, None
    prob = 1.0 / np.exp(x - x[token]).sum()
    others = x.copy()
    others[token] = -np.inf
    second = int(np.argmax(others))
    return token, prob, (second if np.isfinite(others[second]) else None)


def rows(rng: np.random.Generator, v: int):
    base = (rng.standard_normal(v) * 2).astype(np.float32)
    yield "noise", base
    spiked = base.copy()
    spiked[v // 3] += 25.0
    yield "one far above the rest", spiked
    two = spiked.copy()
    two[v - 1] = spiked[v // 3]  # a tie at the top, the second id in the rest past the grid
    yield "tied top", two
    runner = spiked.copy()
    runner[[5, v // 2, v - 2]] = spiked[v // 3] - 12.0  # three tied runners-up, below the band
    yield "tied runners-up below the band", runner
    same_column = spiked.copy()
    fold = max(2, v // 16384)
    same_column[v // 3 + v // fold] = spiked[v // 3] - 1.0  # the runner-up in the top's column
    yield "runner-up in the top's column", same_column
    masked = spiked.copy()
    masked[rng.random(v) < 0.7] = -np.inf
    masked[v // 3] = 30.0
    yield "most masked", masked
    alone = np.full(v, -np.inf, dtype=np.float32)
    alone[v - 1] = 1.0
    yield "one finite, in the rest", alone
    flat = (rng.standard_normal(v) * 0.5).astype(np.float32)
    yield "flat (falls back)", flat
    yield "all equal", np.zeros(v, np.float32)
    yield "quantised", np.round(spiked).astype(np.float32)


@pytest.mark.parametrize("v", [100, 8_192, 49_152, 151_936, 152_067, 262_144])
def test_peak_is_the_argmax_and_runner_up_with_the_confidence_close(v: int) -> None:
    rng = np.random.default_rng(v)
    for name, logits in rows(rng, v):
        token, prob, second = peak(logits)
        want_token, want_prob, want_second = exact(logits)
        assert (token, second) == (want_token, want_second), name
        # Exact within the band; the share below it (each token under e^-BAND of the
        # top) is estimated, and these rows put up to half the mass there.
        assert prob == pytest.approx(want_prob, rel=0.1), name


def test_peak_estimates_a_heavy_tail_from_its_sample() -> None:
    # 262,143 tokens just below the band: each alone is nothing, together they are 5%
    # of the mass. An estimate that dropped them would say 1.0.
    v = 262_144
    logits = np.full(v, -BAND - 2.0, dtype=np.float32)
    logits[0] = 0.0
    logits[1:] += np.random.default_rng(3).random(v - 1).astype(np.float32) * 0.1
    token, prob, second = peak(logits)
    want_token, want_prob, want_second = exact(logits)
    assert (token, second) == (want_token, want_second)
    assert want_prob < 0.98
    assert prob == pytest.approx(want_prob, rel=0.01)


def test_a_nan_row_falls_back_to_the_plain_argmax() -> None:
    logits = np.zeros(50_000, np.float32)
    logits[123] = np.nan
    assert peak(logits)[0] == int(np.argmax(logits))


@pytest.mark.parametrize("v", [8_192, 12_345, 152_067, 262_144])
def test_row_grid_finds_every_token_above_a_cut(v: int) -> None:
    rng = np.random.default_rng(v)
    x = (rng.standard_normal(v) * 3).astype(np.float32)
    x[v - 1] = x.max() + 1  # in the rest when v is not a multiple of the fold
    row = RowGrid(x, 4096)
    assert row.top == float(x.max())
    for floor in (float(x.max()) - 0.5, 6.0, float(np.sort(x)[-40])):
        ids, vals = row.above(floor)
        np.testing.assert_array_equal(ids, np.flatnonzero(x > floor))
        np.testing.assert_array_equal(vals, x[ids])
        ids, _ = row.above(floor, inclusive=True)
        np.testing.assert_array_equal(ids, np.flatnonzero(x >= floor))


def test_top_n_by_columns_keeps_the_reference_order_when_the_candidates_are_exactly_n() -> None:
    # Forty distinct values, one per column at the top: the column bound finds exactly
    # the forty, and they must still come back above-the-cut first, the cut's last.
    v = 262_144
    x = np.zeros(v, np.float32)
    ids = np.arange(40) * 7 + 3
    x[ids] = np.arange(1, 41, dtype=np.float32)  # the lowest id holds the cut, the 40th largest
    got = top_n(x, 40)
    assert got[-1] == ids[0]  # the cut last, though its id is the lowest
    np.testing.assert_array_equal(np.sort(got), ids)
