"""A speculative round whose guess is a tree (docs/ARCHITECTURE.md, "The speculative round").

The drafters make a line as always, and say where else the text might go: a second
candidate beside an unsure draft token (``Draft.alternatives``), a second place to
copy from that says something else (``Draft.other_copies``). ``grow_tree`` hangs
those beside the line; the target verifies every node in one batch
(``TreeBackend.evaluate_tree``), ``token_tree`` walks it, and the backend keeps the
kept path as its one sequence. For the rest of the loop the round then looks like a
line: the kept path, and after it the first candidate the target turned down.

Branches come from two places: the draft model, where a token's probability is low (a
second candidate beside it: greedy, the runner-up; sampled, a second draw from the
draft's q without the first), and copying, where the context and a copy source match
and then disagree (both copies, merged into a trie where they agree). A round has at
most as many leaves as the target verifies sequences in one batch (``grows_trees``:
the context's ``n_seq_max``, ``TREE_BRANCHES`` = 8 in ``app/engine/gguf/context_shape.py``);
the auto policy adds at most ``TREE_SECONDS`` = 3 second candidates a round
(``draft_policy.py``).

In llama.cpp, each batch token carries the sequence ids of the leaves below it, and
seq 0 is copied to each branch first; after acceptance the backend keeps one sequence
again (``keep_branch``), so the round's invariants hold as for a line. The part of the
kept path off the first chain sits in cells after the first chain's, where attention
would sum the cache out of position order and move a quantised model's logits; so it
leaves the cache and goes in again at the head of the next batch, and the logits stay
bit for bit those of a line (tests/backends/llama/test_tree_backend.py).

Compare: ``tandem bench --draft-max auto --tree off,on`` runs lines, "auto", and trees,
"auto tree=on", side by side on the same prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from app.engine.backend import ModelBackend
from app.engine.speculation.draft import Draft
from app.engine.speculation.sampling import warp_dist
from app.engine.speculation.target_rows import row_argmax
from app.engine.speculation.token_tree import TokenTree, accept_greedy, accept_sampled
from app.engine.types import SamplingConfig


def grows_trees(target: ModelBackend) -> int:
    """How many branches the target verifies in one batch (0: it has no trees)."""
    return int(getattr(target, "tree_branches", 0)) if hasattr(target, "evaluate_tree") else 0


def branch_for(branches: bool, target: ModelBackend, branch: Callable[[float], bool] | None) -> dict:
    """The keyword a drafter that ``branches`` takes to branch (none where the round cannot
    be a tree), at most as many second candidates as the target has branches beyond the first."""
    room = grows_trees(target) - 1
    if branch is None or room < 1 or not branches:
        return {}
    taken = 0

    def limited(prob: float) -> bool:
        nonlocal taken
        if taken >= room or not branch(prob):
            return False
        taken += 1
        return True

    return {"branch": limited}


@dataclass
class TreeRound:
    tree: TokenTree
    main: Draft                                       # the line, as a chain round drafts it
    kinds: dict[int, str] = field(default_factory=dict)  # first node of each branch: "second" / "fork"
    # Whether the draft-length policy learns from the tree (``DraftPolicy.observe_tree``):
    # a tree carrying a drafter's rider is not the policy's to judge.
    teaches_policy = True

    @property
    def guesses(self) -> int:
        """The tree's guesses: the nodes the target judged, the root left out."""
        return len(self.tree) - 1

    def accept(self, rows: np.ndarray, sampling: SamplingConfig, rng: np.random.Generator) -> tuple[list[int], int]:
        if sampling.greedy:
            return accept_greedy(self.tree, row_argmax(rows))
        return accept_sampled(self.tree, lambda node: warp_dist(rows[node], sampling), rng)

    def main_accepted(self, path: list[int]) -> int:
        """How much of the line the target kept."""
        line, n = self.tree.first_chain(0), 0
        while n < len(line) and n + 1 < len(path) and path[n + 1] == line[n]:
            n += 1
        return n

    def as_line(self, path: list[int]) -> tuple[Draft, int]:
        """The round as a line for the events and the counts: the kept path's tokens,
        then (where the target turned the candidates after it down) the first of them;
        and how many were kept."""
        tree, nodes = self.tree, path[1:]
        rejected = tree.children(path[-1])[:1]
        shown = nodes + rejected
        return Draft(tokens=[tree.tokens[n] for n in shown], probs=[tree.probs[n] for n in shown]), len(nodes)


def grow_tree(last: int, draft: Draft, copied: bool, fork_copies: bool, target: ModelBackend) -> TreeRound | None:
    """The round's tree, or None where it stays a line (nothing to branch with, or a
    target without trees)."""
    room = grows_trees(target) - 1
    if room < 1 or not draft.tokens:
        return None
    if copied:
        if not (fork_copies and draft.other_copies):
            return None
        tree = TokenTree.rooted_at(last)
        tree.add_path(0, draft.tokens)
        kinds = {}
        for other in draft.other_copies[:room]:
            before = len(tree)
            tree.add_path(0, other)
            if len(tree) > before:
                kinds[before] = "fork"  # the first node where this copy says something else
        return TreeRound(tree, draft, kinds) if kinds else None
    if not draft.alternatives:
        return None
    tree = TokenTree.rooted_at(last)
    line = []
    for i, token in enumerate(draft.tokens):
        line.append(tree.add(line[-1] if line else 0, token, draft.probs[i], draft.q[i] if draft.q else None))
    kinds = {}
    for i, (token, prob, q) in sorted(draft.alternatives.items())[:room]:
        if i < len(line):
            kinds[tree.add(line[i - 1] if i else 0, token, prob, q)] = "second"
    return TreeRound(tree, draft, kinds)
