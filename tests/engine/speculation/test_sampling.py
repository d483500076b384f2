"""Tests of app.engine.speculation.sampling: warping, sampling and speculative acceptance.

The statistical tests use fixed seeds, so they are deterministic; the thresholds
(chi-square p > 1e-3, total variation < 0.01) are what a correct sampler meets
with room to spare at these sample counts, and a broken one misses by far
(see test_chi_square_catches_a_wrong_residual).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from scipy import stats

from app.engine.speculation.sampling import (
    greedy_accept,
    rejection_accept,
    sample,
    warp,
)
from app.engine.types import SamplingConfig

P5 = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
LOGITS5 = np.log(P5).astype(np.float32)


def cfg(**kw) -> SamplingConfig:
    return SamplingConfig(**{"temperature": 1.0, **kw})


def normed(a: Sequence[float]) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a / a.sum()


class FixedUniforms:
    """Stands in for np.random.Generator where a test needs to choose the uniforms."""

    def __init__(self, values: Sequence[float]) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def assert_distribution(counts: np.ndarray, probs: np.ndarray, tv_max: float = 0.01) -> None:
    """counts must look drawn from probs: chi-square p > 1e-3 and TV < tv_max."""
    probs = normed(probs)
    n = counts.sum()
    assert counts[probs == 0].sum() == 0, "a zero-probability outcome came out"
    expected = probs * n
    # Pool the rare outcomes so that the chi-square approximation holds.
    big = expected >= 5
    obs, exp = list(counts[big]), list(expected[big])
    rare = ~big & (probs > 0)
    if rare.any():
        obs.append(counts[rare].sum())
        exp.append(expected[rare].sum())
    pvalue = stats.chisquare(obs, exp).pvalue
    tv = 0.5 * np.abs(counts / n - probs).sum()
    assert pvalue > 1e-3 and tv < tv_max, f"chi-square p={pvalue:.3g}, TV={tv:.4f}"


def random_dist(rng: np.random.Generator, v: int, zero_frac: float = 0.2) -> np.ndarray:
    """A Dirichlet draw with some entries forced to zero (never all of them)."""
    d = rng.dirichlet(np.full(v, 0.7))
    zeros = rng.random(v) < zero_frac
    zeros[rng.integers(v)] = False
    d[zeros] = 0.0
    return d / d.sum()


# ---------------------------------------------------------------------------
# warp


def test_top_k() -> None:
    np.testing.assert_allclose(warp(LOGITS5, cfg(top_k=2)), [4 / 7, 3 / 7, 0, 0, 0], rtol=1e-6)


@pytest.mark.parametrize(("top_p", "kept"), [(0.3, 1), (0.65, 2), (0.75, 3), (0.99, 5)])
def test_top_p(top_p: float, kept: int) -> None:
    expected = np.where(np.arange(5) < kept, P5, 0.0)
    np.testing.assert_allclose(warp(LOGITS5, cfg(top_p=top_p)), normed(expected), rtol=1e-6)


def test_top_p_mass_is_renormalised_over_top_k() -> None:
    # As llama.cpp: after top-k=4 the masses are P5[:4]/0.95, whose first two reach
    # 0.737 >= 0.72; over the full softmax they would only reach 0.7 and keep three.
    np.testing.assert_allclose(warp(LOGITS5, cfg(top_k=4, top_p=0.72)), [4 / 7, 3 / 7, 0, 0, 0], rtol=1e-6)


def test_min_p() -> None:
    # Keep p >= 0.3 * 0.4 = 0.12.
    np.testing.assert_allclose(warp(LOGITS5, cfg(min_p=0.3)), normed([0.4, 0.3, 0.15, 0, 0]), rtol=1e-6)


@pytest.mark.parametrize("t", [0.5, 2.0])
def test_temperature(t: float) -> None:
    np.testing.assert_allclose(warp(LOGITS5, cfg(temperature=t)), normed(P5 ** (1 / t)), rtol=1e-6)


def test_chain_order() -> None:
    # top-k 4 -> top-p 0.9 keeps 4 (0.895 < 0.9) -> min-p 0.3 keeps 3 -> T=2 takes sqrt.
    got = warp(LOGITS5, cfg(temperature=2.0, top_k=4, top_p=0.9, min_p=0.3))
    np.testing.assert_allclose(got, normed(np.sqrt([0.4, 0.3, 0.15, 0, 0])), rtol=1e-6)
    # Here top-p (2 tokens) cuts deeper than min-p (4 tokens).
    got = warp(LOGITS5, cfg(top_p=0.65, min_p=0.2))
    np.testing.assert_allclose(got, [4 / 7, 3 / 7, 0, 0, 0], rtol=1e-6)


def test_greedy_is_one_hot_at_argmax() -> None:
    logits = np.array([0.1, 3.0, -2.0, 3.0, 1.0], dtype=np.float32)
    for c in [SamplingConfig(), SamplingConfig(temperature=0.0, top_k=2, top_p=0.5, min_p=0.5)]:
        got = warp(logits, c)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, [0, 1, 0, 0, 0])  # tie: the lower id


def test_ties_go_to_the_lower_id() -> None:
    logits = np.array([1.0, 2.0, 2.0, 2.0, 0.0], dtype=np.float32)
    np.testing.assert_allclose(warp(logits, cfg(top_k=2)), [0, 0.5, 0.5, 0, 0])
    np.testing.assert_allclose(warp(np.zeros(4, np.float32), cfg(top_p=0.5)), [0.5, 0.5, 0, 0])
    # min-p keeps everything at the threshold.
    np.testing.assert_allclose(warp(logits, cfg(min_p=1.0)), [0, 1 / 3, 1 / 3, 1 / 3, 0])
    np.testing.assert_allclose(warp(logits, cfg(min_p=1.5)), [0, 1 / 3, 1 / 3, 1 / 3, 0])


def test_input_untouched_and_output_normalised() -> None:
    logits = np.random.default_rng(0).standard_normal(50_000).astype(np.float32) * 3
    before = logits.copy()
    logits.flags.writeable = False  # any in-place write would raise
    for c in [cfg(temperature=0.7), cfg(top_k=40, top_p=0.95, min_p=0.05, temperature=0.8),
              cfg(top_p=0.9), cfg(min_p=0.1, temperature=1.3), SamplingConfig()]:
        probs = warp(logits, c)
        assert probs.dtype == np.float64 and probs.shape == logits.shape
        assert abs(probs.sum() - 1.0) < 1e-12 and probs.min() >= 0.0
    np.testing.assert_array_equal(logits, before)


def _masked(logits: np.ndarray, token_ids) -> np.ndarray:
    """Logits with token_ids made impossible, as the loop masks EOS for ignore_eos."""
    out = np.array(logits, copy=True)
    out[list(token_ids)] = -np.inf
    return out


def test_masked_logits_never_kept() -> None:
    masked = _masked(LOGITS5, [0, 3])
    probs = warp(masked, cfg(top_k=3))
    np.testing.assert_allclose(probs, normed([0, 0.3, 0.15, 0, 0.05]), rtol=1e-6)
    assert warp(masked, SamplingConfig())[1] == 1.0
    with pytest.raises(ValueError):
        warp(_masked(LOGITS5, range(5)), cfg())


def reference_warp(logits: np.ndarray, c: SamplingConfig) -> np.ndarray:
    """The chain written plainly: one full sort, float64 throughout."""
    x = logits.astype(np.float64)
    order = np.argsort(-x, kind="stable")  # descending, ties by lower id
    if 0 < c.top_k < x.size:
        order = order[: c.top_k]
    lv = x[order]
    p = np.exp(lv - lv[0])
    p /= p.sum()
    n = lv.size
    if c.top_p < 1.0:
        reached = np.flatnonzero(np.cumsum(p) >= c.top_p)
        if reached.size:
            n = min(n, int(reached[0]) + 1)
    if c.min_p > 0.0:
        n = min(n, int((lv >= lv[0] + np.log(c.min_p)).sum()))
    w = np.exp((lv[:n] - lv[0]) / c.temperature)
    out = np.zeros(x.size)
    out[order[:n]] = w / w.sum()
    return out


@pytest.mark.parametrize("quantised", [False, True])
def test_warp_matches_plain_reference(quantised: bool) -> None:
    rng = np.random.default_rng(1)
    configs = [
        cfg(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
        cfg(temperature=0.7, top_p=0.9),
        cfg(temperature=1.0, top_p=0.5),
        cfg(temperature=1.5, top_p=0.999),
        cfg(temperature=0.6, min_p=0.02),
        cfg(temperature=1.2, top_k=1000, top_p=0.8),
        cfg(temperature=0.9, top_k=5, min_p=0.5),
        cfg(temperature=1.0, top_p=0.0),
    ]
    for scale in [1.0, 4.0]:
        logits = (rng.standard_normal(50_257) * scale).astype(np.float32)
        if quantised:  # many exact ties
            logits = np.round(logits * 4) / 4
        for c in configs:
            got, want = warp(logits, c), reference_warp(logits, c)
            np.testing.assert_array_equal(got > 0, want > 0, err_msg=str(c))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-12, err_msg=str(c))


# ---------------------------------------------------------------------------
# sample


def test_sample_inverse_cdf_across_blocks() -> None:
    # sample() finds the block first, then the token; check it against one flat
    # cumsum on a vector spanning several blocks, zeros included, unnormalised.
    rng = np.random.default_rng(2)
    w = rng.random(1000) * (rng.random(1000) < 0.5) * 3.0
    w[[255, 256, 511, 512, 999]] = [0.0, 2.0, 2.0, 0.0, 1.0]
    cdf = np.cumsum(w)
    for u in np.concatenate([rng.random(2000), [0.0, np.nextafter(1.0, 0.0)]]):
        want = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        assert sample(w, FixedUniforms([u])) == min(want, 999)


def test_sample_distribution_and_zeros() -> None:
    rng = np.random.default_rng(3)
    probs = random_dist(rng, 20, zero_frac=0.4)
    counts = np.bincount([sample(probs, rng) for _ in range(30_000)], minlength=20)
    assert_distribution(counts, probs, tv_max=0.02)
    assert sample(np.array([0.0, 0.0, 1.0]), FixedUniforms([0.0])) == 2
    assert sample(np.array([0.0, 1.0, 0.0]), FixedUniforms([np.nextafter(1.0, 0.0)])) == 1
    with pytest.raises(ValueError):
        sample(np.zeros(3), rng)


# ---------------------------------------------------------------------------
# greedy_accept


@pytest.mark.parametrize(
    ("draft", "argmax", "expected"),
    [
        ([5, 6, 7], [5, 6, 7, 8], (3, 8)),  # all kept, then the bonus
        ([5, 6, 7], [5, 9, 7, 8], (1, 9)),  # first mismatch at 1: the target's token
        ([5, 6, 7], [4, 6, 7, 8], (0, 4)),
        ([], [3], (0, 3)),
    ],
)
def test_greedy_accept(draft: list[int], argmax: list[int], expected: tuple[int, int]) -> None:
    assert greedy_accept(draft, argmax) == expected


def test_greedy_accept_needs_one_more_argmax() -> None:
    with pytest.raises(ValueError):
        greedy_accept([1, 2], [1, 2])


# ---------------------------------------------------------------------------
# rejection_accept: the first emitted token is distributed as p_0

Accept = Callable[[Sequence[int], np.ndarray, np.ndarray, np.random.Generator], tuple[int, int]]


def first_token_counts(p: np.ndarray, q: np.ndarray, n: int, seed: int, accept: Accept = rejection_accept) -> np.ndarray:
    """Simulate n rounds; count the token each emits first (d_0 or the correction)."""
    rng = np.random.default_rng(seed)
    k, v = q.shape
    # The rows of q need not depend on earlier drafts for this marginal, so all
    # drafts are drawn up front.
    drafts = np.stack([rng.choice(v, size=n, p=q[i]) for i in range(k)], axis=1).tolist()
    firsts = []
    for row in drafts:
        n_acc, token = accept(row, q, p, rng)
        firsts.append(row[0] if n_acc else token)
    return np.bincount(firsts, minlength=v)


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize(("v", "n"), [(10, 100_000), (50, 200_000)])
def test_first_token_matches_target(v: int, n: int, k: int) -> None:
    rng = np.random.default_rng(100 * v + k)
    p = np.stack([random_dist(rng, v) for _ in range(k + 1)])
    q = np.stack([random_dist(rng, v) for _ in range(k)])
    # Make sure both kinds of mismatched support occur at position 0.
    p[0, 0], q[0, 0] = 0.1, 0.0
    p[0, 1], q[0, 1] = 0.0, 0.1
    p[0] /= p[0].sum()
    q[0] /= q[0].sum()
    assert_distribution(first_token_counts(p, q, n, seed=k), p[0])


@pytest.mark.parametrize("k", [1, 4])
def test_first_token_matches_target_one_hot_draft(k: int) -> None:
    # A deterministic drafter (prompt lookup): each q row is one-hot on its draft.
    rng = np.random.default_rng(7 + k)
    p = np.stack([random_dist(rng, 10) for _ in range(k + 1)])
    guesses = rng.integers(10, size=k)
    guesses[0] = int(np.argmax(p[0]))  # a likely guess: both branches get exercised
    q = np.eye(10)[guesses]
    assert_distribution(first_token_counts(p, q, 100_000, seed=k), p[0])


def test_chi_square_catches_a_wrong_residual() -> None:
    """The statistical check has teeth: resampling from p on rejection is biased."""

    def sample_p_on_reject(draft, q, p, rng):
        n_acc, token = rejection_accept(draft, q, p, rng)
        return (n_acc, sample(p[n_acc], rng)) if n_acc < len(draft) else (n_acc, token)

    rng = np.random.default_rng(11)
    p = np.stack([random_dist(rng, 10) for _ in range(2)])
    q = random_dist(rng, 10)[None, :]
    with pytest.raises(AssertionError, match="chi-square"):
        assert_distribution(first_token_counts(p, q, 50_000, seed=0, accept=sample_p_on_reject), p[0])


# ---------------------------------------------------------------------------
# rejection_accept: whole sequences from a Markov target


def speculative_sequences(p_trans: np.ndarray, q_trans: np.ndarray, length: int, n: int, seed: int) -> np.ndarray:
    """Generate n sequences after token 0 by speculative rounds of random length 1..3.

    Row t of p_trans / q_trans is the next-token distribution after token t. Each
    round drafts from q given the previous draft, verifies against p given each
    prefix, and continues from the last emitted token, as the engine does.
    """
    rng = np.random.default_rng(seed)
    q_cdf = np.cumsum(q_trans, axis=1).tolist()  # plain lists: bisect is the cheap draw
    q_support = [np.flatnonzero(row).tolist() for row in q_trans]
    out = np.empty((n, length), dtype=np.int64)
    for s in range(n):
        seq: list[int] = []
        last = 0
        while len(seq) < length:
            drafts, prev = [], last
            for _ in range(1 + int(rng.random() * 3)):  # k in 1..3, cheaper than integers()
                cdf = q_cdf[prev]
                draw = bisect.bisect_right(cdf, rng.random() * cdf[-1])
                prev = draw if draw < len(cdf) else q_support[prev][-1]  # u*total rounded up
                drafts.append(prev)
            context = [last, *drafts]
            n_acc, token = rejection_accept(drafts, q_trans[context[:-1]], p_trans[context], rng)
            seq += drafts[:n_acc] + [token]
            last = seq[-1]
        out[s] = seq[:length]
    return out


def markov_joint(p_trans: np.ndarray) -> np.ndarray:
    """Exact P(x1, x2, x3 | x0 = 0), flattened in the order of np.ravel_multi_index."""
    return np.einsum("a,ab,bc->abc", p_trans[0], p_trans, p_trans).ravel()


@pytest.mark.parametrize("drafter", ["random", "deterministic"])
def test_joint_sequences_match_markov_target(drafter: str) -> None:
    """100k sequences of 3 tokens, vocab 6: the joint over 216 outcomes matches p.

    With this seed the target puts its mass on 71 sequences; an exact sampler's
    TV at 100k is about 0.006 (sd well under 0.001), clear of the 0.01 bound.
    """
    v = 6
    rng = np.random.default_rng(12)
    p_trans = np.stack([random_dist(rng, v, zero_frac=0.3) for _ in range(v)])
    if drafter == "random":
        q_trans = np.stack([random_dist(rng, v, zero_frac=0.3) for _ in range(v)])
    else:  # e.g. prompt lookup: always the same guess after a given token
        q_trans = np.eye(v)[rng.integers(v, size=v)]
    seqs = speculative_sequences(p_trans, q_trans, length=3, n=100_000, seed=13)
    counts = np.bincount(np.ravel_multi_index(seqs.T, (v, v, v)), minlength=v**3)
    assert_distribution(counts, markov_joint(p_trans))


# ---------------------------------------------------------------------------
# rejection_accept: edge cases


def test_p_equal_q_always_accepts() -> None:
    rng = np.random.default_rng(20)
    p = np.stack([random_dist(rng, 8) for _ in range(4)])
    for _ in range(2000):
        drafts = [int(rng.choice(8, p=p[i])) for i in range(3)]
        n_acc, token = rejection_accept(drafts, p[:3], p, rng)
        assert n_acc == 3 and p[3][token] > 0


def test_disjoint_supports_always_reject_and_resample_p() -> None:
    rng = np.random.default_rng(21)
    p = np.zeros((2, 10))
    p[:, :5] = rng.dirichlet(np.ones(5), size=2)
    q = np.zeros((1, 10))
    q[0, 5:] = rng.dirichlet(np.ones(5))
    tokens = []
    for _ in range(30_000):
        n_acc, token = rejection_accept([int(rng.choice(10, p=q[0]))], q, p, rng)
        assert n_acc == 0
        tokens.append(token)
    assert_distribution(np.bincount(tokens, minlength=10), p[0], tv_max=0.02)


def test_token_the_draft_never_proposes_comes_out_at_its_rate() -> None:
    p = np.array([[0.5, 0.3, 0.2], [1 / 3, 1 / 3, 1 / 3]])
    q = np.array([[0.0, 0.5, 0.5]])
    counts = first_token_counts(p, q, 50_000, seed=22)
    assert_distribution(counts, p[0], tv_max=0.02)
    assert abs(counts[0] / 50_000 - 0.5) < 0.01


def test_draft_outside_q_support() -> None:
    # A drafter that reports q(d) = 0 for its own guess: kept iff the target allows it.
    q = np.array([[0.0, 1.0, 0.0]])
    p = np.array([[0.2, 0.8, 0.0], [0.0, 0.0, 1.0]])
    assert rejection_accept([0], q, p, np.random.default_rng(0)) == (1, 2)
    n_acc, token = rejection_accept([2], q, p, np.random.default_rng(0))
    assert n_acc == 0 and token in (0, 1)


def test_one_hot_draft_accepts_with_p_of_guess() -> None:
    rng = np.random.default_rng(23)
    p = np.array([[0.1, 0.2, 0.4, 0.3], [0.25, 0.25, 0.25, 0.25]])
    q = np.eye(4)[[2]]
    n, accepted, corrections = 40_000, 0, []
    for _ in range(n):
        n_acc, token = rejection_accept([2], q, p, rng)
        if n_acc:
            accepted += 1
        else:
            corrections.append(token)
    assert stats.binomtest(accepted, n, 0.4).pvalue > 1e-3
    # The residual is p with the guess removed.
    assert_distribution(np.bincount(corrections, minlength=4), [0.1, 0.2, 0, 0.3], tv_max=0.02)


def test_residual_lost_to_rounding_falls_back_to_p() -> None:
    # p is q scaled down by rounding-sized error: a rejection is possible, yet
    # max(0, p - q) is all zero, so the correction must come from p.
    q = np.array([[0.25, 0.25, 0.5]])
    p = np.vstack([q * (1 - 1e-12), [[0, 0, 1.0]]])
    rng = FixedUniforms([1 - 1e-13, 0.1])  # reject d=2, then draw u = 0.1 from p
    assert rejection_accept([2], q, p, rng) == (0, 0)


def test_no_drafts_samples_from_p0() -> None:
    p = np.array([[0.0, 1.0]])
    assert rejection_accept([], np.zeros((0, 2)), p, np.random.default_rng(0)) == (0, 1)


def test_shapes_checked() -> None:
    with pytest.raises(ValueError):
        rejection_accept([0, 1], np.full((2, 2), 0.5), np.full((2, 2), 0.5), np.random.default_rng(0))


def test_same_seed_same_result() -> None:
    setup = np.random.default_rng(24)
    p = np.stack([random_dist(setup, 30) for _ in range(5)])
    q = np.stack([random_dist(setup, 30) for _ in range(4)])
    logits = setup.standard_normal(1000).astype(np.float32)

    def run(seed: int) -> list:
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(300):
            drafts = [sample(q[i], rng) for i in range(4)]
            out.append(rejection_accept(drafts, q, p, rng))
            out.append(sample(warp(logits, cfg(temperature=0.9, top_p=0.9)), rng))
        return out

    assert run(5) == run(5)
    assert run(5) != run(6)
