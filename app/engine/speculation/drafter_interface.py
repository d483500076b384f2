"""What every drafter offers the speculative round, and what the round tells it back.

The round (``speculative.py``) drafts, verifies, accepts, rolls back and accounts; it
never asks what kind of drafter it holds. Each drafter (``drafters.ModelDrafter``,
``drafters.LookupDrafter``, ``lookahead.LookaheadDrafter``, ``text_bridge.TextBridge``)
answers the same questions:

- ``propose``: the next few tokens (a ``Draft``), with what the acceptance rule needs;
- ``drafts_now``: whether this round drafts at all (drafting through text turns itself
  off where it does not pay);
- ``rider``: nodes it wants verified beside its guess in the same batch, for its own
  learning (lookahead's Jacobi window), or None;
- ``observe``: what the target kept of the round, and what the round cost; a drafter
  learns from it and counts its own figures into the reply's stats;
- ``roll_back``: forget what the target turned down (a drafter with a cache trims it);
- ``report``: its note for the reply's stats (why it stopped drafting, when it did).

``DrafterDefaults`` holds the answers of a drafter that needs none of these: a new
drafter overrides what it uses, and the round needs no edit.

A drafter that reads more of the target than its tokens (an MTP head's hidden rows, an
EAGLE-3 drafter's layer inputs) is told of every target batch below the round, by the
target backend itself (``app/backends/llama/target_batches.py``, llama.cpp's ``process``
step): the round neither sees nor forwards those rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

import numpy as np

from app.engine.speculation.draft import Draft
from app.engine.types import DrafterKind, SamplingConfig, Stats

if TYPE_CHECKING:
    from app.engine.backend import ModelBackend
    from app.engine.speculation.constraints import Constraint
    from app.engine.speculation.tree_round import TreeRound


@dataclass(frozen=True)
class RoundOutcome:
    """One round as the drafter sees it afterwards."""

    proposed: bool   # its proposal was the round's guess (not a copy, not a plain step)
    carried: bool    # its rider rode in the verification batch
    drafted: int     # guesses the target judged (a tree's nodes, the rider's left out)
    accepted: int    # of them, kept
    written: int     # tokens the round wrote: the kept ones and the target's own
    seconds: float   # what the round took, all in


class Rider(Protocol):
    """Nodes a drafter has verified beside its guess, in the same batch."""

    width: int  # the tree branches it takes

    def shape(self, last: int, draft: Draft) -> TreeRound:
        """The round's tree: the guess, then the rider's nodes."""

    def advance(self, rows: np.ndarray, emitted: int) -> None:
        """The target's rows for the whole tree, and how many tokens the round wrote."""


class Drafter(Protocol):
    kind: DrafterKind                 # what the stats and the side panel name
    model: ModelBackend | None        # the model it runs (the engine may choose its threads)
    seconds: float                    # time spent inside model calls, for the stats
    # The process's CPU clock for each draft step (``Draft.step_cpu_seconds``), which
    # only a thread chooser reads: the engine sets None where none does.
    cpu_clock: Callable[[], float] | None
    copies_context: bool  # it copies from the context itself: the engine copies only from elsewhere
    branches: bool        # ``propose`` takes ``branch``: its guess may grow second candidates

    def prepare(self, context: Sequence[int]) -> None:
        """Process a new prompt ahead of the first proposal."""

    def unread(self, context: Sequence[int]) -> int:
        """Tokens of ``context`` that ``prepare`` would read (its cost before a first
        guess): where they are many, the engine writes the first token before it reads."""

    def drafts_now(self, plain_seconds: float | None, adapts: bool) -> bool:
        """Does this round draft? (Asked once a round the plan drafts in; ``adapts``: the
        draft length is auto's, else the user fixed one.)"""

    def rider(self, room: int, branches: int, plain_seconds: float | None) -> Rider | None:
        """What rides in this round's batch (asked once a round where a tree may be
        verified): ``room`` tokens are left in the reply, the target verifies up to
        ``branches`` lines in one batch."""

    def propose(self, context: Sequence[int], n_max: int, sampling: SamplingConfig,
                rng: np.random.Generator, p_min: float, go_on: Callable[[float], bool] | None = None,
                constraint: Constraint | None = None, branch: Callable[[float], bool] | None = None,
                lines: int = 1) -> Draft:
        """Up to ``n_max`` tokens. A token less probable than ``p_min`` is not proposed;
        after each token, ``go_on(its probability)`` false ends the draft. Both look
        only at the draft's own probabilities, so where a draft ends never biases
        what the target accepts. Under ``constraint`` (the committed state; a drafter
        drafts on a fork of it, never advancing it) a drafter may draft what it allows.
        ``branch(a token's probability)`` true asks for a second candidate there
        (``branches`` drafters); ``lines`` above one allows other lines
        (``Draft.other_copies``) up to that many in all."""

    def observe(self, outcome: RoundOutcome, stats: Stats) -> None:
        """What the round kept and cost; the drafter counts its own figures in ``stats``."""

    def roll_back(self, committed: Sequence[int]) -> None:
        """The round is over and ``committed`` is what the target kept: forget the rest."""

    def report(self, stats: Stats) -> None:
        """At the end of a reply: the drafter's note, where it has one."""

    def close(self) -> None: ...


class DrafterDefaults:
    """The answers of a drafter that needs none of the round's hooks."""

    model: ModelBackend | None = None
    cpu_clock: Callable[[], float] | None = None
    copies_context = False
    branches = False

    def drafts_now(self, plain_seconds: float | None, adapts: bool) -> bool:
        return True

    def unread(self, context: Sequence[int]) -> int:
        return 0

    def rider(self, room: int, branches: int, plain_seconds: float | None) -> Rider | None:
        return None

    def observe(self, outcome: RoundOutcome, stats: Stats) -> None:
        pass

    def roll_back(self, committed: Sequence[int]) -> None:
        pass

    def report(self, stats: Stats) -> None:
        pass

    def close(self) -> None:
        pass
