"""The sparse distribution (app/engine/speculation/sparse_dist.py) against the dense code it replaced.

``warp_dist`` must give the very distribution the landed dense ``warp`` gave, bit for
bit, ties included (tests/engine/speculation/dense_sampling_reference.py is that code, copied):
on random logits, and on adversarial ones -- ties everywhere and at every cut, -inf,
a top-k larger than the vocabulary, top-p and min-p at their edges, extreme
temperatures, vocabularies small and large (the large ones take the sampled guess of
the top-k cut). The residual and the draws without replacement are checked against
their dense formulas too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.engine.speculation.sampling import near_top, runner_up, sample, top_n, warp_dist
from app.engine.speculation.sparse_dist import Dist
from app.engine.types import SamplingConfig

from . import dense_sampling_reference as ref


def cfg(**kw) -> SamplingConfig:
    return SamplingConfig(**{"temperature": 1.0, **kw})


CONFIGS = [
    cfg(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),  # the app's settings
    cfg(temperature=0.8, top_k=40),
    cfg(temperature=0.7, top_p=0.9),
    cfg(temperature=1.0, top_p=0.5),
    cfg(temperature=1.5, top_p=0.999),
    cfg(temperature=0.6, min_p=0.02),
    cfg(temperature=1.2, top_k=1000, top_p=0.8),
    cfg(temperature=0.9, top_k=5, min_p=0.5),
    cfg(temperature=1.0, top_p=0.0),
    cfg(temperature=1.0, top_p=np.nextafter(1.0, 0.0)),
    cfg(temperature=1.0, top_p=1.0, min_p=1.0),
    cfg(temperature=1.0, min_p=1.5),
    cfg(temperature=1.0, min_p=np.nextafter(0.0, 1.0)),
    cfg(temperature=1e-4, top_k=40, top_p=0.95),
    cfg(temperature=50.0, top_k=40, top_p=0.95, min_p=0.05),
    cfg(temperature=0.8, top_k=10**9, top_p=0.95),  # top-k larger than the vocabulary
    cfg(temperature=0.8, top_k=1),
    cfg(temperature=1.0),  # nothing bounds the set: the dense path
    cfg(temperature=0.5),
]


def assert_same(logits: np.ndarray, c: SamplingConfig) -> None:
    want = ref.warp(logits, c)
    got = warp_dist(logits, c)
    np.testing.assert_array_equal(got.dense(), want, err_msg=str(c))
    # And read token by token, as the acceptance rules read it.
    support = np.flatnonzero(want)
    np.testing.assert_array_equal(got.support(), support)
    np.testing.assert_array_equal(got.probs_at(support), want[support])


def _rows(rng: np.random.Generator, v: int):
    base = (rng.standard_normal(v) * 3).astype(np.float32)
    yield "random", base
    yield "peaked", np.where(np.arange(v) == 7, 25.0, base).astype(np.float32)
    yield "quantised", (np.round(base * 2) / 2).astype(np.float32)  # ties at every cut
    yield "few values", rng.integers(0, 4, v).astype(np.float32)
    flat = np.zeros(v, dtype=np.float32)
    yield "all equal", flat
    masked = base.copy()
    masked[rng.random(v) < 0.5] = -np.inf
    yield "half -inf", masked
    only = np.full(v, -np.inf, dtype=np.float32)
    only[[3, v - 1]] = [1.0, 1.0]
    yield "two finite", only
    tied_top = base.copy()
    tied_top[rng.choice(v, min(60, v), replace=False)] = base.max() + 1  # 60 ties at the top, more than top-k
    yield "tied top", tied_top


@pytest.mark.parametrize("v", [5, 300, 9000, 50_000, 262_144])
def test_warp_dist_is_the_dense_warp_bit_for_bit(v: int) -> None:
    rng = np.random.default_rng(v)
    for (name, logits), c in itertools.product(list(_rows(rng, v)), CONFIGS):
        assert_same(logits, c)


def test_top_n_matches_a_full_partition_with_ties() -> None:
    rng = np.random.default_rng(5)
    for v, n in [(10_000, 40), (262_144, 40), (262_144, 1000), (152_064, 1), (50_000, 49_999)]:
        for logits in (rng.standard_normal(v).astype(np.float32),
                       rng.integers(0, 30, v).astype(np.float32),  # thousands tied at the cut
                       np.zeros(v, np.float32)):
            np.testing.assert_array_equal(top_n(logits, n), ref._top_n(logits, n))


def test_the_unbounded_chain_stays_dense_and_float32() -> None:
    d = warp_dist(np.random.default_rng(0).standard_normal(20_000).astype(np.float32), cfg(temperature=0.7))
    assert d.ids is None and d.w.dtype == np.float32
    bounded = warp_dist(np.random.default_rng(0).standard_normal(20_000).astype(np.float32),
                        cfg(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05))
    assert bounded.ids is not None and bounded.ids.size <= 40


def test_greedy_is_a_point() -> None:
    logits = np.array([1.0, 3.0, 3.0, -np.inf], dtype=np.float32)
    d = warp_dist(logits, SamplingConfig(temperature=0.0))
    np.testing.assert_array_equal(d.dense(), [0, 1, 0, 0])


@pytest.mark.parametrize("dense_p", [False, True])
def test_residual_and_without_match_their_dense_formulas(dense_p: bool) -> None:
    rng = np.random.default_rng(9)
    v = 3000
    for _ in range(30):
        p_cfg = cfg(temperature=1.0) if dense_p else cfg(temperature=0.9, top_k=50, top_p=0.97)
        p = warp_dist(rng.standard_normal(v).astype(np.float32) * 2, p_cfg)
        q = warp_dist(rng.standard_normal(v).astype(np.float32) * 2, cfg(temperature=0.9, top_k=30))
        d = int(q.sample(rng))
        want = np.maximum(p.dense() - q.dense(), 0.0)
        r = p.minus(q, d)
        np.testing.assert_allclose(r.dense(), want / want.sum(), rtol=1e-5, atol=1e-12)
        one_hot = p.minus(None, d)
        expected = p.dense().copy()
        expected[d] = 0
        np.testing.assert_allclose(one_hot.dense(), expected / expected.sum(), rtol=1e-5, atol=1e-12)
        np.testing.assert_array_equal(p.minus(Dist.point(d, v), d).dense(), one_hot.dense())
        drop = q.support()[:3]
        rest = q.without(drop).dense()
        dense_rest = q.dense().copy()
        dense_rest[drop] = 0
        np.testing.assert_allclose(rest, dense_rest / dense_rest.sum(), rtol=1e-12)
    same = warp_dist(np.arange(10, dtype=np.float32), cfg(top_k=3))
    assert same.minus(same, 9) is None  # p == q: no residual to speak of
    assert Dist.point(4, 10).without([4]) is None


def test_a_sparse_draw_follows_its_distribution() -> None:
    rng = np.random.default_rng(11)
    d = warp_dist(rng.standard_normal(5000).astype(np.float32) * 2, cfg(temperature=1.0, top_k=8))
    counts = np.zeros(5000)
    for _ in range(20_000):
        counts[d.sample(rng)] += 1
    want = d.dense()
    assert counts[want == 0].sum() == 0
    assert 0.5 * np.abs(counts / counts.sum() - want).sum() < 0.02
    # One uniform per draw, whichever form: a seed fixes the sequence of draws.
    a, b = np.random.default_rng(1), np.random.default_rng(1)
    assert [sample(d, a) for _ in range(5)] == [d.sample(b) for _ in range(5)]
    assert a.random() == b.random()


def test_near_top_and_runner_up_match_the_full_softmax() -> None:
    rng = np.random.default_rng(2)
    for v in (100, 50_000, 262_144):
        for logits in ((rng.standard_normal(v) * 3).astype(np.float32),
                       np.where(np.arange(v) == 5, 40.0, rng.standard_normal(v)).astype(np.float32),
                       np.round(rng.standard_normal(v)).astype(np.float32)):
            top = int(np.argmax(logits))
            prob, second = near_top(logits, top, second=True)
            x = logits.astype(np.float64)
            want = 1.0 / np.exp(x - x[top]).sum()
            assert prob == pytest.approx(want, rel=1e-5)
            masked = x.copy()
            masked[top] = -np.inf
            assert second == int(np.argmax(masked)) == runner_up(logits, top)
    only = np.full(10, -np.inf, dtype=np.float32)
    only[4] = 0.0
    assert near_top(only, 4, second=True) == (1.0, None)


def test_near_top_estimates_only_a_tail_too_light_to_matter() -> None:
    # A peaked row whose tail (each token under e^-16 of the top) still adds ~1% of the
    # mass: the band is summed exactly, the tail estimated from a sample.
    rng = np.random.default_rng(4)
    v = 262_144
    logits = (-16.5 - rng.random(v)).astype(np.float32)
    logits[rng.choice(v, 500, replace=False)] = -rng.random(500).astype(np.float32) * 10
    logits[77] = 0.0
    x = logits.astype(np.float64)
    want = 1.0 / np.exp(x - x[77]).sum()
    prob, second = near_top(logits, 77, second=True)
    assert prob == pytest.approx(want, rel=1e-3)
    masked = x.copy()
    masked[77] = -np.inf
    assert second == int(np.argmax(masked))


def test_sparse_nonzero_is_flatnonzero() -> None:
    from app.engine.speculation.sampling import sparse_nonzero

    rng = np.random.default_rng(8)
    for v in (5, 63, 64, 1001, 49_152, 152_067):
        for density in (0.0, 0.0005, 0.01, 0.5, 1.0):
            mask = rng.random(v) < density
            np.testing.assert_array_equal(sparse_nonzero(mask), np.flatnonzero(mask))


def test_keep_renormalises_over_what_is_left() -> None:
    for c in (cfg(temperature=1.0), cfg(temperature=0.8, top_k=5)):
        p = warp_dist(np.arange(12, dtype=np.float32) / 3, c)
        mask = np.arange(p.support().size) % 2 == 0
        kept = p.keep(mask)
        want = p.dense().copy()
        want[p.support()[~mask]] = 0
        np.testing.assert_allclose(kept.dense(), want / want.sum(), rtol=1e-12)
