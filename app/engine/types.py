"""Settings and event dataclasses shared by the engine, the CLI and the UI."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

# The shared words live in a leaf module (the history uses them too, and imports no
# engine); the engine's own are re-exported here, where its callers look for them.
from app.vocabulary import DrafterKind, StopReason, TokenKind  # noqa: F401

# Stats.note when speculation was off and nothing else explains why: a terminal says
# it, the window (which shows "no speculation" anyway) leaves it out.
SPECULATION_OFF = "speculation is off"


@dataclass(frozen=True)
class SamplingConfig:
    """How a token is chosen from logits; temperature 0 means greedy."""

    temperature: float = 0.0
    top_k: int = 0         # 0: off
    top_p: float = 1.0     # 1.0: off
    min_p: float = 0.0     # 0.0: off
    seed: int | None = None
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


# The shortest repeat worth copying: on the demo pair's traces, copies after 6 to 12
# matching tokens all measured alike; shorter matches are wrong more often.
COPY_MIN = 6



@dataclass(frozen=True)
class SpecConfig:
    """How much to speculate. ``draft_max="auto"`` lets the engine choose per round."""

    enabled: bool = True
    draft_max: int | Literal["auto"] = 5
    draft_min: int = 1
    p_min: float = 0.0
    # When the last ``copy_min`` tokens occurred earlier in the context, propose what
    # followed them there instead of running the draft model (0: never). Copying costs
    # no draft steps; the draft model catches up on the accepted copy in one batch.
    copy_min: int = 0
    # Token trees (app/engine/speculation/token_tree.py): "auto" lets the auto policy branch where
    # its measurements say a tree pays (a fixed length stays a line), "on" branches
    # wherever the draft is unsure and verifies every differing copy, "off" never.
    tree: Literal["auto", "on", "off"] = "auto"

    @property
    def auto(self) -> bool:
        """Whether the engine chooses each round's length (the one test of ``draft_max``'s
        "auto": ``draft_policy.draft_policy`` makes the policy from it)."""
        return self.draft_max == "auto"

    def with_draft_max(self, draft_max: int | Literal["auto"]) -> SpecConfig:
        """This config drafting at most ``draft_max``; a fixed length under ``draft_min``
        lowers that too (else no round could draft)."""
        changed = dataclasses.replace(self, draft_max=draft_max)
        return changed if changed.auto else dataclasses.replace(changed, draft_min=min(self.draft_min, int(draft_max)))


@dataclass(frozen=True)
class TokenLogprobs:
    """One emitted token's log-probability and the most likely tokens at its position
    (app/engine/speculation/target_rows.py says from which distribution)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob), most likely first


@dataclass(frozen=True)
class TokenEvent:
    """One emitted token. ``text`` is the completed UTF-8 text it finished (may be '')."""

    id: int
    text: str
    kind: TokenKind
    # For CORRECTED tokens: what the draft had proposed at this position.
    draft_id: int | None = None
    draft_text: str | None = None
    draft_prob: float | None = None
    logprobs: TokenLogprobs | None = None  # when the reply was asked for them
    # Drafted through text (a draft of another vocabulary): the round's draft in the
    # draft's own tokens, each one's text, for display only (ACCEPTED and CORRECTED).
    draft_source: tuple[str, ...] | None = None


@dataclass
class Stats:
    """Counters of one generation; derived figures are properties."""

    tokens: int = 0
    rounds: int = 0          # target forward passes that produced tokens
    drafted: int = 0
    accepted: int = 0
    copied: int = 0           # of the drafted tokens, copied from earlier in the context
    copied_accepted: int = 0
    rejections: int = 0      # rounds that ended with a correction
    tree_rounds: int = 0      # rounds whose guess was a token tree
    branch_tokens: int = 0    # of the accepted tokens, those a tree's other branches gave
    lookahead_rounds: int = 0  # rounds whose batch carried lookahead's Jacobi window
    lookahead_note: str = ""   # why lookahead stopped carrying it, when it did
    # The target's memory, where it changes how speculation runs (a recurrent state:
    # chains only, rollback by checkpoints; app/engine/gguf/memory_kinds.py); "" for attention.
    memory_note: str = ""
    drafter: str = ""          # what drafted (DrafterKind's value: model, mtp, ...); "" when nothing did
    bridged: int = 0           # of the drafted tokens, drafted through text (text_bridge.py)
    bridged_accepted: int = 0
    bridge_note: str = ""      # why drafting through text stopped, when it did
    accepted_by_position: list[int] = field(default_factory=list)
    drafted_by_position: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    prompt_eval_tokens: int = 0  # tokens evaluated after reusing the cached prefix
    seconds: float = 0.0         # wall time of generation (after the prompt)
    prompt_seconds: float = 0.0
    draft_seconds: float = 0.0   # inside the draft model's llama.cpp calls
    target_seconds: float = 0.0  # inside the target model's llama.cpp calls
    # Host work (Python and numpy, outside llama.cpp) of the speculative rounds, split by
    # what it serves: drafting (warping and sampling the draft's logits, copying) and
    # verifying (the acceptance rule over the target's rows, building trees, bookkeeping).
    # Time spent by whoever consumes the events is in neither.
    draft_host_seconds: float = 0.0
    verify_host_seconds: float = 0.0
    stop_reason: StopReason | None = None  # None while it runs
    speculative: bool = False
    note: str = ""               # why speculation was off, when it was
    left_out: int = 0            # earliest messages of the chat left out to fit the context
    prompt_notice: str = ""      # the model's chat template failed: why, and that ChatML stood in
    # The median measured cost of one target step on one token (0: none measured yet):
    # what each token costs without speculation, for seconds_saved.
    plain_step_seconds: float = 0.0

    def __post_init__(self) -> None:
        # Stats rebuilt from a stored record carry the reason as its text ('' for none).
        if self.stop_reason is not None and not isinstance(self.stop_reason, StopReason):
            try:
                self.stop_reason = StopReason(self.stop_reason)
            except ValueError:
                self.stop_reason = None

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def alpha(self) -> float:
        """Per-token acceptance probability (maximum-likelihood, i.i.d. model): the α of
        expected-tokens formula in docs/ARCHITECTURE.md, "The speculative round". Unlike
        accepted/drafted it does not count drafts never judged."""
        judged = self.accepted + self.rejections
        return self.accepted / judged if judged else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def plain_seconds(self) -> float:
        """What the reply's tokens would have taken from the target alone: one measured
        plain step each (its Python and sampling left out, so it errs low)."""
        return self.tokens * self.plain_step_seconds

    @property
    def seconds_saved(self) -> float | None:
        """Speculation's saving against the target alone (negative: it cost time); None when
        the reply did not speculate or no plain step was measured."""
        if not self.speculative or self.plain_step_seconds <= 0 or self.seconds <= 0:
            return None
        return self.plain_seconds - self.seconds

    @property
    def speedup(self) -> float | None:
        """``plain_seconds / seconds`` (None as for seconds_saved)."""
        if self.seconds_saved is None:
            return None
        return self.plain_seconds / self.seconds

    @property
    def python_seconds(self) -> float:
        return max(0.0, self.seconds - self.draft_seconds - self.target_seconds)

    @property
    def host_seconds(self) -> float:
        return self.draft_host_seconds + self.verify_host_seconds

    @property
    def host_ms_per_round(self) -> float:
        return 1000.0 * self.host_seconds / self.rounds if self.rounds else 0.0

    @property
    def host_ms_per_drafted(self) -> float:
        """Host milliseconds per drafted token: all host work of the rounds, over the
        tokens drafted (0 when nothing was)."""
        return 1000.0 * self.host_seconds / self.drafted if self.drafted else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_position, self.drafted_by_position)]

    def count_position(self, position: int, accepted: bool) -> None:
        while len(self.drafted_by_position) <= position:
            self.drafted_by_position.append(0)
            self.accepted_by_position.append(0)
        self.drafted_by_position[position] += 1
        if accepted:
            self.accepted_by_position[position] += 1

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "copied": self.copied,
            "copied_accepted": self.copied_accepted,
            "tree_rounds": self.tree_rounds,
            "branch_tokens": self.branch_tokens,
            "lookahead_rounds": self.lookahead_rounds,
            "lookahead_note": self.lookahead_note,
            "memory_note": self.memory_note,
            "bridged": self.bridged,
            "bridged_accepted": self.bridged_accepted,
            "bridge_note": self.bridge_note,
            "acceptance": round(self.acceptance, 4),
            "alpha": round(self.alpha, 4),
            "tokens_per_round": round(self.tokens_per_round, 4),
            "tokens_per_second": round(self.tokens_per_second, 3),
            "acceptance_by_position": [round(a, 4) for a in self.acceptance_by_position],
            "prompt_tokens": self.prompt_tokens,
            "prompt_eval_tokens": self.prompt_eval_tokens,
            "seconds": round(self.seconds, 4),
            "draft_seconds": round(self.draft_seconds, 4),
            "target_seconds": round(self.target_seconds, 4),
            "python_seconds": round(self.python_seconds, 4),
            "draft_host_seconds": round(self.draft_host_seconds, 4),
            "verify_host_seconds": round(self.verify_host_seconds, 4),
            "host_ms_per_round": round(self.host_ms_per_round, 4),
            "host_ms_per_drafted": round(self.host_ms_per_drafted, 4),
            "stop_reason": self.stop_reason or "",
            "speculative": self.speculative,
            "drafter": self.drafter,
            "note": self.note,
            "left_out": self.left_out,
            "prompt_notice": self.prompt_notice,
            "plain_step_seconds": round(self.plain_step_seconds, 6),
            "seconds_saved": None if self.seconds_saved is None else round(self.seconds_saved, 4),
            "speedup": None if self.speedup is None else round(self.speedup, 4),
        }
