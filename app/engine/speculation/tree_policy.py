"""When a round's guess is a tree rather than a line (``draft_max="auto"``; how a tree is
built: ``tree_round.py``; how it is accepted: ``token_tree.py``).

A tree batch of n tokens costs what a chain verification of n tokens costs (the
measured verify line of ``draft_costs.py``), so a branch is one more verified token:
the line's slope, s seconds. What it buys:

- a second candidate beside a draft token of probability q (``Draft.alternatives``)
  yields one token more exactly when the draft so far is accepted up to there
  (chance R), that token is rejected (1 - a(q), a per confidence band) and the target
  takes the second candidate instead (b(q), learned here, per band): R (1 - a) b;
- a second copy (``Draft.other_copies``) yields what the target accepts of it beyond
  what it accepts of the first, learned here per copied token verified.

Either is added when it yields at least what the round's best expected speed would
make of its s seconds (the same test that ends a draft, ``AutoDraftLength._go_on``).
The first branch of a round also pays what a tree round costs beyond a chain round
(sequence copies, the walk), measured. Where none pays, rounds stay chains, and
today's costs are unchanged.

b is learned from chain rounds too: greedy, a rejected draft token's runner-up is
known afterwards (``Draft.runner_ups``), so the policy knows what a branch there would
have done without paying for one.

``SpecConfig.tree``: "auto" (the default) lets this policy decide per token; "on"
branches below probability ``BRANCH_BELOW`` and forks every differing copy, with a
fixed draft length too; "off" makes lines, as "auto" does with a fixed length. Where branches do not pay, auto makes
lines and costs only a runner-up lookup per rejected round.
"""

from __future__ import annotations

from typing import Callable

from app.engine.speculation.acceptance import ConfidenceAcceptance, band_of
from app.engine.speculation.draft_costs import RecentCost
from app.engine.speculation.draft import Draft
from app.engine.speculation.token_tree import TokenTree

SECOND_PRIOR = 0.5      # the chance a runner-up is the target's token where the draft's was not, untested
FORK_PRIOR = (1.0, 4.0)  # (tokens won, copied tokens verified) a second copy counts for untested
_FORK_DECAY = 0.98
BRANCH_BELOW = 0.8       # tree="on": branch at every draft token less probable than this


class BranchPolicy:
    """Learns what branches yield and decides, per round, which are worth their tokens."""

    def __init__(self) -> None:
        self.second = ConfidenceAcceptance(prior=SECOND_PRIOR)
        self._fork = list(FORK_PRIOR)
        self.tree_overhead = RecentCost()  # what a tree round costs beyond its steps and its batch

    def brancher(self, accept: list[float], speed: float, slope: float, extra: float,
                 limit: int) -> Callable[[float], bool]:
        """``branch(prob)``, asked of each draft token in turn: add a second candidate
        beside this one, of probability ``prob``? At most ``limit`` a round. ``accept``:
        acceptance per confidence band; ``speed``: the round's best expected tokens per
        second; ``slope``: seconds per verified token; ``extra``: what a tree round
        costs beyond a chain round."""
        second = self.second.rates
        taken, reach = 0, 1.0  # reach: the chance the draft before this token is all accepted

        def branch(prob: float) -> bool:
            nonlocal taken, reach
            band = band_of(prob)
            gain = reach * (1.0 - accept[band]) * second[band]
            reach *= accept[band]
            cost = slope + (extra if taken == 0 else 0.0)
            if taken >= limit or gain < speed * cost:
                return False
            taken += 1
            return True

        return branch

    def fork_pays(self, floor: float, slope: float) -> bool:
        """Is a second copy worth verifying, by what forks won per token?"""
        won, verified = self._fork
        return won / verified >= floor * slope

    # -- learning -----------------------------------------------------------
    def observe_chain(self, draft: Draft, n_accepted: int, token: int) -> None:
        """A greedy chain round: had there been a runner-up beside the rejected token,
        would the target have taken it?"""
        if n_accepted < len(draft.tokens) and n_accepted < len(draft.runner_ups):
            second = draft.runner_ups[n_accepted]
            self.second.observe(draft.probs[n_accepted], second == token)

    def observe_tree(self, tree: TokenTree, path: list[int], kinds: dict[int, str]) -> None:
        """A tree round: every branch the walk judged, and whether it was kept.
        ``kinds``: the nodes that start a branch, "second" or "fork"."""
        on_path = set(path)
        for node, kind in kinds.items():
            parent = tree.parents[node]
            if parent not in on_path:
                continue  # never judged: the walk left before its parent
            siblings = tree.children(parent)
            first = siblings[0]
            if first in on_path:
                continue  # the first candidate was kept: the branch was not judged
            kept = node in on_path
            if kind == "second":
                self.second.observe(tree.probs[first], kept)
            else:
                won = sum(1 for n in path if n > 0 and _under(tree, n, node)) if kept else 0
                self._fork[0] = _FORK_DECAY * self._fork[0] + won
                self._fork[1] = _FORK_DECAY * self._fork[1] + _subtree_size(tree, node)


def _under(tree: TokenTree, node: int, top: int) -> bool:
    while node > top:
        node = tree.parents[node]
    return node == top


def _subtree_size(tree: TokenTree, top: int) -> int:
    return sum(1 for n in range(top, len(tree)) if _under(tree, n, top))
