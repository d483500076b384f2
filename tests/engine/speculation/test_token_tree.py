"""Token trees: the structure, greedy acceptance, and the exactness of recursive rejection
sampling over siblings for each way siblings can be drawn (and its failure where the
rule is given the wrong proposal distribution)."""

from __future__ import annotations

import bisect

import numpy as np
import pytest
from scipy import stats

from app.engine.speculation.token_tree import TokenTree, accept_greedy, accept_sampled, without

V = 5


def test_nodes_depths_leaves_and_paths():
    tree = TokenTree.rooted_at(9)
    a = tree.add(0, 1)
    b = tree.add(a, 2)
    c = tree.add(0, 3)  # a second candidate beside a
    d = tree.add(c, 4)
    assert tree.tokens == [9, 1, 2, 3, 4] and tree.parents == [-1, 0, 1, 0, 3]
    assert tree.children(0) == [a, c] and tree.leaves == [b, d] and tree.depth == 2
    assert tree.path_to(d) == [0, c, d] and tree.first_chain() == [a, b]
    with pytest.raises(ValueError):
        tree.add(7, 1)


def test_copies_share_their_common_prefix_and_fork_where_they_differ():
    tree = TokenTree.rooted_at(0)
    first = tree.add_path(0, [5, 6, 7])
    second = tree.add_path(0, [5, 6, 8, 9])
    assert second[:2] == first[:2]  # one node for the shared 5, 6
    assert tree.parents[second[2]] == first[1] and tree.children(first[1]) == [first[2], second[2]]
    assert len(tree) == 1 + 3 + 2


def test_greedy_walk_follows_the_argmax_through_any_sibling():
    tree = TokenTree.rooted_at(0)
    a = tree.add(0, 1)
    tree.add(a, 2)
    c = tree.add(0, 3)
    tree.add(c, 4)
    argmax = [3, 2, 7, 4, 6]  # after the root the target wants 3 (the second candidate), then 4
    assert accept_greedy(tree, argmax) == ([0, c, 4], 6)  # through c and its child, then the bonus
    assert accept_greedy(tree, [1, 2, 5, 0, 0]) == ([0, a, 2], 5)
    assert accept_greedy(tree, [8, 0, 0, 0, 0]) == ([0], 8)  # every candidate rejected


# ---------------------------------------------------------------------------
# Sampled: the first two emitted tokens of a depth-2 tree over a Markov target

def _dist(rng, zero=True):
    d = rng.dirichlet(np.full(V, 0.8))
    if zero:
        d[rng.integers(V)] = 0.0  # supports differ: both kinds of mismatch occur
    return d / d.sum()


@pytest.fixture(scope="module")
def chains():
    rng = np.random.default_rng(3)
    p = np.stack([_dist(rng) for _ in range(V)])  # target: row = previous token
    q = np.stack([_dist(rng) for _ in range(V)])  # draft
    return p, q


def _draw(cdf: list[float], rng) -> int:
    return min(bisect.bisect_right(cdf, rng.random() * cdf[-1]), len(cdf) - 1)


def _siblings(scheme: str, q: np.ndarray, rng, judged_as: str | None = None):
    """Three candidates after the root and the proposal each is judged with."""
    judged_as = judged_as or scheme
    out, drawn = [], []
    for i in range(3):
        if scheme == "iid":
            token = _draw(np.cumsum(q).tolist(), rng)
            cond = q
        elif scheme == "without":
            cond = without(q, drawn)
            if cond is None:
                break
            token = _draw(np.cumsum(cond).tolist(), rng)
        elif scheme == "top":  # deterministic: the draft's top candidates
            order = np.argsort(-q, kind="stable")
            if q[order[i]] == 0:
                break
            token, cond = int(order[i]), None
        elif scheme == "copy then draw":  # a copy's guess, then draws without replacement
            if i == 0:
                token, cond = 2, None
            else:
                cond = without(q, drawn)
                if cond is None:
                    break
                token = _draw(np.cumsum(cond).tolist(), rng)
        drawn.append(token)
        if judged_as == "q" and scheme != "copy then draw":
            cond = q  # SpecInfer's rule for i.i.d. draws, applied to draws it does not fit
        out.append((token, cond))
    return out


def _first_two(p, q, scheme, n, seed, judged_as=None):
    rng = np.random.default_rng(seed)
    q_cdf = [np.cumsum(row).tolist() for row in q]
    counts = np.zeros(V * V, dtype=np.int64)
    for _ in range(n):
        tree = TokenTree.rooted_at(0)
        for token, cond in _siblings(scheme, q[0], rng, judged_as):
            node = tree.add(0, token, q=cond)
            child = _draw(q_cdf[token], rng)  # one draft token after each candidate
            tree.add(node, child, q=q[token])
        path, token = accept_sampled(tree, lambda i: p[tree.tokens[i]], rng)
        emitted = [tree.tokens[i] for i in path[1:]] + [token]
        if len(emitted) < 2:  # the root's candidates all rejected: one more plain draw
            emitted.append(_draw(np.cumsum(p[emitted[0]]).tolist(), rng))
        counts[emitted[0] * V + emitted[1]] += 1
    return counts


def _chi_square(counts, exact):
    n = counts.sum()
    assert counts[exact == 0].sum() == 0, "an outcome the target never writes came out"
    keep = exact > 0
    return stats.chisquare(counts[keep], exact[keep] * n).pvalue


@pytest.mark.parametrize("scheme", ["iid", "without", "top", "copy then draw"])
def test_recursive_rejection_is_exact_for_each_way_of_drawing_siblings(chains, scheme):
    """60k trees, three candidates after the root, one draft token after each: the first
    two emitted tokens follow the target's joint (25 outcomes) whichever way the
    candidates were drawn, as long as each is judged by what it was drawn from."""
    p, q = chains
    exact = np.outer(p[0], np.ones(V)).ravel() * p.ravel()  # P(a) P(b | a), a * V + b
    counts = _first_two(p, q, scheme, 60_000, seed=len(scheme))
    assert _chi_square(counts, exact) > 1e-3
    assert 0.5 * np.abs(counts / counts.sum() - exact).sum() < 0.015


@pytest.mark.parametrize("scheme", ["without", "top"])
def test_judging_every_sibling_by_q_is_wrong_unless_they_were_drawn_iid(chains, scheme):
    """The subtlety, with teeth: siblings drawn without replacement (or the draft's top
    candidates) but judged by min(1, p/q) with the draft's own q, as if they were
    i.i.d., come out biased; the chi-square sees it."""
    p, q = chains
    exact = np.outer(p[0], np.ones(V)).ravel() * p.ravel()
    counts = _first_two(p, q, scheme, 60_000, seed=5, judged_as="q")
    assert _chi_square(counts, exact) < 1e-6


def test_a_residual_lost_to_rounding_falls_back_to_the_current_target():
    tree = TokenTree.rooted_at(0)
    q = np.array([0.5, 0.5, 0, 0, 0])
    tree.add(0, 0, q=q)
    rng = np.random.default_rng(0)
    for _ in range(50):  # p == q: the candidate is always kept or, if not, p is sampled
        path, token = accept_sampled(tree, lambda i: q, rng)
        assert token in (0, 1)


def test_without_replacement_distribution():
    q = np.array([0.5, 0.25, 0.25, 0, 0])
    assert np.allclose(without(q, [0]), [0, 0.5, 0.5, 0, 0])
    assert without(np.array([1.0, 0, 0, 0, 0]), [0]) is None
