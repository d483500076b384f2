"""A drafter's proposal: the guessed tokens and what the acceptance rule, the draft
policy, token trees and the display need of them (``drafter_interface.py`` says who
makes one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.speculation.sparse_dist import Dist


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    # Per drafted token: the distribution it was drawn from (temperature > 0 only;
    # the rejection rule needs exactly that q: a ``Dist``, a copy's a point at its
    # token) and the drafter's probability of it.
    q: list[Dist] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    # Seconds per draft step, for the cost model. Catching up on tokens the
    # drafter had not seen (after plain rounds) is left out: it is one batch,
    # whose cost says nothing about the next draft step.
    step_seconds: list[float] = field(default_factory=list)
    # The process's CPU seconds over each of those steps: with the threads, they say
    # whether the threads had their cores (``thread_policy.py``).
    step_cpu_seconds: list[float] = field(default_factory=list)
    catchup_seconds: float = 0.0  # that catching up (more than the usual [d_k, bonus])
    # The token whose probability fell under p_min and ended the draft, and that
    # probability: the target's next token says whether cutting there was right.
    dropped: tuple[int, float] | None = None
    # Token trees (``token_tree.py``): per position where the drafter was asked to
    # branch, a second candidate there (token, the drafter's probability of it, and
    # sampled: the distribution it was drawn from, q without the first candidate).
    alternatives: dict[int, tuple[int, float, Dist | None]] = field(default_factory=dict)
    # Greedy, per drafted token: the drafter's best other token (None: nothing else was
    # possible), so that a rejection can say afterwards whether the runner-up was the
    # target's token. Worked out while the logits are at hand: a backend's logits may be
    # a view that the next step overwrites, and are never kept.
    runner_ups: list[int | None] = field(default_factory=list)
    # A copy: what another place to copy from says instead, where it disagrees.
    other_copies: list[list[int]] = field(default_factory=list)
    # Drafted through text (``text_bridge.py``): what the draft wrote, in its own tokens
    # (each one's text), for display only.
    source: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.tokens)
