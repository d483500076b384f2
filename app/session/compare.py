"""Compare, without widgets: a speculative reply against the same turn written plainly.

Speculative decoding is lossless: at temperature 0 the plain run must write the same
tokens, and when it sampled, the same distribution. What a front end needs to show
that is here: what a reply was asked with (``TurnRecord``), whether and how it can be
asked again (``refusal``, ``plan_rerun``), where two token streams part
(``first_difference``), and the figures and the words for them (``Comparison``).
``compare_turn`` runs both sides on a loaded ``ChatSession``, for a front end that has
no reply yet (the window's Compare re-runs only the plain side through its worker).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

from app.engine.speculation.detokenize import visible
from app.engine.types import SamplingConfig, SpecConfig, Stats, TokenEvent
from app.vocabulary import MessageState

IDENTICAL = "Identical — speculation changed nothing but the speed."


@dataclass(frozen=True)
class TurnRecord:
    """What a reply was asked with: enough to ask for it again."""

    history: tuple[tuple[str, str], ...]
    system_prompt: str
    sampling: SamplingConfig
    max_tokens: int
    models: object = None  # the models loaded at the time, e.g. a ModelSpec (None: unknown)
    recorded: bool = True  # False: rebuilt from the settings as they are now


@dataclass(frozen=True)
class RerunPlan:
    """How the plain side is asked for: its length limit, how many tokens to expect, caveats."""

    max_tokens: int
    expected_tokens: int
    note: str


@dataclass(frozen=True)
class Difference:
    """The first token (0-based ``index``) where the runs part; None on a side that had ended."""

    index: int
    spec_text: str | None
    spec_id: int | None
    plain_text: str | None
    plain_id: int | None


def refusal(status: MessageState, stats: Stats | None, tokens: int) -> str | None:
    """Why a reply cannot be compared (one line), or None when it can."""
    if status in (MessageState.STREAMING, MessageState.FAILED) or stats is None or tokens == 0:
        return "This reply has no finished text to compare."
    if not stats.speculative:
        why = f" ({stats.note})" if stats.note else ""
        return (f"This reply was written without speculation{why}, "
                "so there is no speculative run to compare with plain decoding.")
    return None


def plan_rerun(record: TurnRecord, *, status: MessageState, tokens: int, models_now: object = None) -> RerunPlan:
    """The plain run for a reply of ``tokens`` tokens: a stopped reply is matched at its
    length; a reply whose settings were not recorded, or whose models changed, says so."""
    notes = []
    max_tokens = record.max_tokens
    if status == MessageState.STOPPED:
        max_tokens = tokens
        notes.append(f"The reply was stopped after {max_tokens} tokens; the plain run writes as many.")
    if not record.recorded:
        notes.append("This reply's own settings were not recorded (it was restored or written "
                     "before Compare was installed): the plain run uses the current sampling settings.")
    if record.models is not None and record.models != models_now:
        notes.append("The models changed since this reply was written; the plain run uses the ones "
                     "loaded now.")
    # Greedy runs write the same tokens, so as many as the reply; sampled ones up to the limit.
    expected = tokens if record.sampling.greedy else max_tokens
    return RerunPlan(max_tokens, expected, " ".join(notes))


def first_difference(spec: Sequence[TokenEvent], plain: Sequence[TokenEvent]) -> Difference | None:
    """Where the two token streams first differ; None when they are the same.

    Token ids decide when both sides have them (a restored reply may carry only
    text, with id -1); otherwise the token texts do.
    """
    by_id = all(e.id >= 0 for e in spec) and all(e.id >= 0 for e in plain)

    def key(event: TokenEvent) -> object:
        return event.id if by_id else event.text

    for index in range(max(len(spec), len(plain))):
        a = spec[index] if index < len(spec) else None
        b = plain[index] if index < len(plain) else None
        if a is None or b is None or key(a) != key(b):
            return Difference(index,
                              a.text if a else None, a.id if a and a.id >= 0 else None,
                              b.text if b else None, b.id if b and b.id >= 0 else None)
    return None


def token_shown(text: str | None, token_id: int | None = None) -> str:
    """One side of a difference: the token's text made visible, and its id when known."""
    if text is None:
        return "(the reply had ended)"
    shown = visible(text) if text else "(part of a character)"
    return shown + (f" (token {token_id})" if token_id is not None else "")


@dataclass(frozen=True)
class Comparison:
    """One finished comparison: the reply as written (speculative) against the plain re-run."""

    sampling: SamplingConfig
    spec_stats: Stats
    plain_stats: Stats
    spec_text: str
    plain_text: str
    difference: Difference | None
    note: str = ""  # caveats about how comparable the runs are

    @classmethod
    def of(cls, sampling: SamplingConfig, spec_events: Sequence[TokenEvent], spec_stats: Stats,
           plain_events: Sequence[TokenEvent], plain_stats: Stats, note: str = "") -> Comparison:
        """The comparison of two finished runs, from their tokens and figures."""
        return cls(sampling=sampling, spec_stats=spec_stats, plain_stats=plain_stats,
                   spec_text="".join(e.text for e in spec_events),
                   plain_text="".join(e.text for e in plain_events),
                   difference=first_difference(spec_events, plain_events), note=note)

    @property
    def identical(self) -> bool:
        return self.difference is None

    @property
    def speedup(self) -> float:
        """Speculative tokens/s over plain tokens/s (0 when the plain run produced nothing)."""
        plain = self.plain_stats.tokens_per_second
        return self.spec_stats.tokens_per_second / plain if plain > 0 else 0.0

    @property
    def verdict(self) -> str:
        if self.identical:
            if self.sampling.greedy:
                return IDENTICAL
            return "Identical this time — speculation changed nothing but the speed."
        where = f"token {self.difference.index + 1}"
        if self.sampling.greedy:
            return f"Not identical: the texts part at {where}, by a floating-point near-tie."
        return f"Different texts (from {where} on) — expected at temperature {self.sampling.temperature:g}."

    @property
    def explanation(self) -> str:
        if self.sampling.greedy:
            if self.identical:
                return ("At temperature 0 both runs take the target model's most likely token each "
                        "time, so speculation must not change a single token, and it did not.")
            return ("At temperature 0 both runs take the target's most likely token, so this is not a "
                    "speculation error but rounding: verifying a draft scores several tokens in one "
                    "batch, plain decoding scores one at a time, and with F32/F16 weights (on CPU or "
                    "GPU) the two results can differ in the last digits — enough to flip the choice "
                    "between two almost equally likely tokens. After that token the two runs continue "
                    "from different texts.")
        seeded = ("" if self.sampling.seed is None else
                  " The same seed does not make the runs match: speculation also draws random numbers "
                  "to accept or reject draft tokens, so the two runs use the seed's numbers differently.")
        return (f"At temperature {self.sampling.temperature:g} each run samples its tokens independently, so "
                "the texts are expected to differ, just as two plain runs would. Speculative decoding is "
                "lossless in distribution: every token is drawn from exactly the distribution the target "
                "model alone samples from. Lossless means the same distribution, not the same text." + seeded)

    @property
    def difference_detail(self) -> str:
        d = self.difference
        if d is None:
            return ""
        return (f"First difference at token {d.index + 1}: speculative {token_shown(d.spec_text, d.spec_id)}, "
                f"plain {token_shown(d.plain_text, d.plain_id)}.")


def compare_turn(session, history: Sequence[tuple[str, str]], sampling: SamplingConfig, spec: SpecConfig,
                 max_tokens: int, *, system_prompt: str = "",
                 cancel: threading.Event | None = None) -> Comparison:
    """Write the reply to ``history`` with ``spec``, then plainly, on a loaded ``ChatSession``
    (slow: on the thread that owns its models); ``cancel`` stops whichever side runs."""
    spec_run = session.reply(history, sampling, spec, max_tokens, system_prompt=system_prompt, cancel=cancel)
    spec_events = spec_run.run()
    plain_run = session.reply(history, sampling, SpecConfig(enabled=False), max_tokens,
                              system_prompt=system_prompt, cancel=cancel)
    plain_events = plain_run.run()
    return Comparison.of(sampling, spec_events, spec_run.stats, plain_events, plain_run.stats)
