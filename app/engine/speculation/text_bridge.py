"""Drafting across vocabularies: a draft model whose tokens are not the target's
proposes through text (docs/cross-vocabulary.md).

The draft keeps its own tokenization of the conversation: the target's committed
tokens, written out as text (a special token as its name, e.g. ``<start_of_turn>``),
tokenized with the draft's vocabulary. Each round the draft drafts a few of its own
tokens; their text, re-tokenized with the target's vocabulary, is the round's
proposal: a fixed token sequence, built and verified exactly as a copy is
(``LookupDrafter.draft_of``: a one-hot q when sampled), so the reply stays the
target's own, greedy and sampled. Acceptance is whatever the target makes of it.

Where the two tokenizations part ways:
- Text is bytes. The draft's tokens and the target's may each hold part of one UTF-8
  character (byte-fallback tokens, a byte-level BPE's pieces of an emoji). The draft
  reads the committed text up to its last whole character; a proposal is cut at its
  last whole character, and while the committed text ends inside a character the
  draft's text must first finish that character (else nothing is proposed).
- A proposal keeps the target's tokens up to the last point where both tokenizations
  have a boundary (``agreed_prefix``): a target token that would end inside a draft
  token is a guess at text the draft has not finished writing.
- After a round the draft's cache goes back to the last of its tokens whose text still
  agrees with the committed text, and a few more to the start of that word
  (``BACK_TO_WORD``): a word the target finished differently is tokenized again the
  way the draft's own tokenizer splits it. The draft then catches up in one batch.
- An end of turn the draft drafts ends its proposal (the target writes its own end, as
  with a copy); ``ignore_eos`` keeps the draft from drafting one at all.

The bridge has costs a same-vocabulary draft has not: re-tokenizing every round and
the catch-up after a rejection. ``BridgePolicy`` measures what rounds drafted through
text yield per second against plain steps and turns the bridge off where it does not
pay (``note`` says so), trying it again now and then.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np

from app.engine.backend import ModelBackend
from app.engine.speculation.constraints import Constraint
from app.engine.speculation.draft import Draft
from app.engine.speculation.drafter_interface import DrafterDefaults, RoundOutcome
from app.engine.speculation.drafters import LookupDrafter, ModelDrafter
from app.engine.speculation.probes import ProbeBackoff, rate
from app.engine.tokens import common_prefix
from app.engine.types import DrafterKind, SamplingConfig, Stats

BACK_TO_WORD = 8  # draft tokens the cache may go back beyond the text's agreement, to a word's start
WORD_START = frozenset(b" \t\n\r")  # both families attach a space to the word after it

BridgeMode = Literal["auto", "on", "off"]


def whole_chars(data: bytes | bytearray) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 character."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte < 0x80:
            return n  # ASCII ends whatever came before
        if byte >= 0xC0:  # a lead byte: is its character complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return n if back >= need else n - back
    return n


def valid_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` that is valid UTF-8, as text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return data[:exc.start].decode("utf-8")


def agreed_prefix(target_ends: Sequence[int], draft_ends: Sequence[int]) -> int:
    """How many target tokens end at or before the last offset both tokenizations end a
    token at (``*_ends``: each token's end offset in the same text, ascending)."""
    shared = set(draft_ends)
    for i in range(len(target_ends) - 1, -1, -1):
        if target_ends[i] in shared:
            return i + 1
    return 0


class _Text:
    """One model's view of a text: its tokens and where each one's bytes end."""

    def __init__(self, model: ModelBackend) -> None:
        self.model = model
        self.tokens: list[int] = []
        self.ends: list[int] = []
        self.text = bytearray()

    def piece(self, token: int, at: int) -> bytes:
        """A token's bytes in the text: a special token's name (llama.cpp gives special
        tokens no bytes), and nothing for the BOS a tokenizer puts first."""
        if at == 0 and token == self.model.bos_id and self.model.add_bos:
            return b""
        return self.model.token_bytes(token) or self.model.token_text(token).encode("utf-8")

    def keep(self, n: int) -> None:
        del self.tokens[n:], self.ends[n:]
        del self.text[self.ends[-1] if self.ends else 0:]

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.text += self.piece(token, len(self.tokens))
            self.tokens.append(token)
            self.ends.append(len(self.text))


@dataclass
class BridgeStats:
    """What the bridge itself cost (beyond the draft model's steps), for the docs and bench."""

    rounds: int = 0
    tokenize_seconds: float = 0.0
    fed_tokens: int = 0   # draft tokens fed to the draft model before its draft steps (the catch-up)
    no_proposal: int = 0  # rounds where the draft's text gave the target nothing to verify


class TextBridge(DrafterDefaults):
    """A drafter whose draft model has a vocabulary of its own (see the module's docstring)."""

    kind = DrafterKind.MODEL

    def __init__(self, draft: ModelBackend, target: ModelBackend, mode: BridgeMode = "auto") -> None:
        self.model = draft  # the thread policy reads it, as a model drafter's
        self.target = target
        self.policy = BridgePolicy(mode)
        self.stats = BridgeStats()
        self._steps = ModelDrafter(draft, draft.n_vocab, eog_ids=draft.eog_ids)
        self._fixed = LookupDrafter(target.n_vocab)  # a fixed proposal is built as a copy is
        self._eog = frozenset(draft.eog_ids)
        self._own_seconds = 0.0
        self._target = _Text(target)  # the committed text, in the target's tokens
        self._draft = _Text(draft)    # its first ``whole_chars`` bytes, in the draft's tokens

    @property
    def seconds(self) -> float:
        return self._steps.seconds + self._own_seconds

    @property
    def cpu_clock(self) -> Callable[[], float] | None:
        return self._steps.cpu_clock

    @cpu_clock.setter
    def cpu_clock(self, clock: Callable[[], float] | None) -> None:
        self._steps.cpu_clock = clock

    def prepare(self, context: Sequence[int]) -> None:
        started = time.perf_counter()
        self._sync(context)
        self._own_seconds += time.perf_counter() - started
        if len(self._draft.tokens) < self.model.n_ctx:
            self._steps.prepare(self._draft.tokens)

    def propose(self, context: Sequence[int], n_max: int, sampling: SamplingConfig,
                rng: np.random.Generator, p_min: float,
                go_on: Callable[[float], bool] | None = None, constraint: Constraint | None = None,
                branch: Callable[[float], bool] | None = None, lines: int = 1) -> Draft:
        """As ``Drafter.propose``, in the target's tokens (one line). The draft drafts in its own (a
        grammar is the target's: the engine cuts the proposal where it refuses)."""
        started = time.perf_counter()
        self.stats.rounds += 1
        tail = self._sync(context)
        sync_seconds = time.perf_counter() - started
        # The draft may need more tokens than the target for the same text: where its
        # context is full it proposes nothing (the target goes on alone).
        n_max = min(n_max, self.model.n_ctx - len(self._draft.tokens))
        if tail is None or n_max <= 0:
            self._own_seconds += sync_seconds
            self.stats.no_proposal += 1
            return Draft()
        reuse = common_prefix(self.model.tokens, self._draft.tokens)
        self.stats.fed_tokens += len(self._draft.tokens) - min(reuse, len(self._draft.tokens) - 1)
        own = self._steps.propose(self._draft.tokens, n_max, sampling, rng, p_min, go_on)
        t = time.perf_counter()
        draft = self._proposal(own, tail, n_max, sampling, t)
        spent = sync_seconds + time.perf_counter() - t
        self._own_seconds += spent
        self.stats.tokenize_seconds += spent
        if not draft.tokens:
            self.stats.no_proposal += 1
        return draft

    # -- the draft's text ----------------------------------------------------------
    def _sync(self, context: Sequence[int]) -> bytes | None:
        """Bring both texts up to ``context``; returns the committed text's bytes past the
        draft's (part of a character), or None when that cannot be drafted from."""
        target, draft = self._target, self._draft
        target.keep(common_prefix(target.tokens, context))
        target.extend(context[len(target.tokens):])
        text = bytes(target.text)
        whole = whole_chars(text)
        # The draft's tokens whose text still agrees with the committed text ...
        agree = _common_bytes(draft.text, text[:whole])
        kept = _count_upto(draft.ends, agree)
        if agree < whole or kept < len(draft.tokens):
            # ... back to where a word starts, so it is tokenized the draft's own way.
            start = kept
            for back in range(kept, max(kept - BACK_TO_WORD, 0) - 1, -1):
                end = draft.ends[back - 1] if back else 0
                if back == 0 or end >= whole or text[end] in WORD_START:
                    start = back
                    break
            draft.keep(start)
            at = draft.ends[-1] if draft.ends else 0
            draft.extend(tokenize_exactly(self.model, text[at:whole].decode("utf-8"), add_special=not draft.tokens,
                                          parse_special=True) or [])
            if bytes(draft.text) != text[:whole]:
                # The draft's tokenizer does not give back the text (it normalises it):
                # keep what agrees; nothing is drafted until the texts meet again.
                draft.keep(_count_upto(draft.ends, _common_bytes(draft.text, text[:whole])))
                return None
        return text[whole:]

    def _proposal(self, own: Draft, tail: bytes, n_max: int, sampling: SamplingConfig, started: float) -> Draft:
        """The draft's tokens, as target tokens after the committed text."""
        tokens = own.tokens[:next((i for i, t in enumerate(own.tokens) if t in self._eog), len(own.tokens))]
        pieces = [self._draft.piece(t, 1) for t in tokens]
        data = b"".join(pieces)
        if not data.startswith(tail):  # the committed text ends inside a character the draft did not finish
            return Draft()
        text = valid_prefix(data[len(tail):whole_chars(data)])
        if not text:
            return Draft()
        proposed = tokenize_exactly(self.target, text, add_special=False, parse_special=False) or []
        target_ends = _ends(self.target.token_bytes(t) for t in proposed)
        if not target_ends or target_ends[-1] != len(text.encode("utf-8")):
            return Draft()  # the target's tokenizer does not give the text back: propose nothing
        draft_ends = [end - len(tail) for end in _ends(pieces)]  # one per draft token (some <= 0)
        n = min(agreed_prefix(target_ends, draft_ends), n_max)
        draft = self._fixed.draft_of(proposed[:n], sampling, started)
        # The draft model's confidence, for the policy (each target token: the least sure
        # of the draft tokens it draws on), and what the draft wrote in its own tokens.
        draft.probs = [_least_sure(own.probs, draft_ends, target_ends, i) for i in range(n)]
        draft.step_seconds = _spread(sum(own.step_seconds) + time.perf_counter() - started, n)
        draft.step_cpu_seconds = _spread(sum(own.step_cpu_seconds), n)
        draft.catchup_seconds = own.catchup_seconds
        draft.source = tuple(p.decode("utf-8", errors="replace") for p in pieces)
        return draft  # no ``dropped``: a draft token's id says nothing in the target's vocabulary

    def drafts_now(self, plain_seconds: float | None, adapts: bool) -> bool:
        return self.policy.drafts(plain_seconds, adapts)

    def observe(self, outcome: RoundOutcome, stats: Stats) -> None:
        if outcome.proposed:  # a round through text: what it wrote, all in, judges the bridge
            stats.bridged += outcome.drafted
            stats.bridged_accepted += outcome.accepted
            self.policy.observe(outcome.written, outcome.seconds)

    def report(self, stats: Stats) -> None:
        stats.bridge_note = self.policy.note

    def close(self) -> None:
        self._steps.close()


def tokenize_exactly(model: ModelBackend, text: str, *, add_special: bool, parse_special: bool) -> list[int] | None:
    """``text``'s tokens whose bytes are ``text`` (after a BOS when ``add_special`` adds one).
    A SentencePiece tokenizer with ``add_space_prefix`` (Llama 2, Mistral) puts a space before
    the text it is given; a piece in the middle of a text must not have it, so the piece is
    tokenized after a line break and the tokens of that break are dropped. None: no way found."""
    tokens = model.tokenize(text, add_special=add_special, parse_special=parse_special)
    lead = 1 if add_special and tokens and tokens[0] == model.bos_id and model.add_bos else 0
    data = text.encode("utf-8")
    if b"".join(_piece(model, t) for t in tokens[lead:]) == data:
        return tokens
    marked = model.tokenize("\n" + text, add_special=add_special, parse_special=parse_special)
    at, seen = lead, b""
    while at < len(marked) and len(seen) < 2 and seen in (b"", b" "):
        seen += _piece(model, marked[at])
        at += 1
        if seen in (b"\n", b" \n") and b"".join(_piece(model, t) for t in marked[at:]) == data:
            return marked[:lead] + marked[at:]
    return None


def _piece(model: ModelBackend, token: int) -> bytes:
    return model.token_bytes(token) or model.token_text(token).encode("utf-8")


def _common_bytes(a: bytes | bytearray, b: bytes | bytearray) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _count_upto(ends: Sequence[int], offset: int) -> int:
    """How many tokens end at or before ``offset``."""
    n = 0
    while n < len(ends) and ends[n] <= offset:
        n += 1
    return n


def _ends(pieces) -> list[int]:
    ends, at = [], 0
    for piece in pieces:
        at += len(piece)
        ends.append(at)
    return ends


def _least_sure(probs: Sequence[float], draft_ends: Sequence[int], target_ends: Sequence[int], i: int) -> float:
    start = target_ends[i - 1] if i else 0
    covering = [probs[j] for j, end in enumerate(draft_ends)
                if j < len(probs) and end > start and (j == 0 or draft_ends[j - 1] < target_ends[i])]
    return min(covering, default=1.0)


def _spread(seconds: float, n: int) -> list[float]:
    return [seconds / n] * n if n else []


class BridgePolicy:
    """Draft through text or not: tokens per second of rounds drafted through text
    against plain steps (one token each; the engine's measured plain step).

    Judged after ``WARMUP`` rounds through text, and off after ``OFF_AFTER`` verdicts in a
    row that it does not pay; a clear verdict (under ``CLEAR_SHARE`` of plain's rate after
    ``CLEAR_WARMUP`` rounds) turns it off at once: the bridge costs more than a
    same-vocabulary draft, and a short reply should not pay for a long trial (on the
    2-core bench, SmolLM2 drafting for Gemma 3 ran at 2.6 tokens/s against 9.4 plain,
    and six rounds of that slowed a 32-token reply by a quarter or more). Off, it is tried again after
    ``PROBE_EVERY`` rounds, then twice as long each time it still does not pay (up to
    ``PROBE_MOST``). ``mode`` "on" / "off" decides without measuring (a fixed draft
    length asks for "on": the user chose to draft)."""

    WARMUP = 4
    OFF_AFTER = 2
    CLEAR_WARMUP = 2
    CLEAR_SHARE = 0.6
    PROBE_EVERY = 128  # a probe costs a catch-up on every token since the last: rarer than lookahead
    PROBE_MOST = 1024
    KEEP = 16  # rounds the rate is taken over

    def __init__(self, mode: BridgeMode = "auto") -> None:
        self.mode = mode
        self._rounds: deque[tuple[int, float]] = deque(maxlen=self.KEEP)
        self._votes = 0
        self._probes = ProbeBackoff(self.PROBE_EVERY, self.PROBE_MOST)
        self._plain: float | None = None
        self.off = mode == "off"
        self.note = "drafting through text is off" if self.off else ""

    def drafts(self, plain_seconds: float | None, auto: bool = True) -> bool:
        """Does this round draft through text? (Ask once a round; ``auto``: the draft
        length is auto's, else the user fixed one and it drafts unless the mode is "off".)"""
        if self.mode != "auto" or not auto:
            return self.mode != "off"
        self._plain = plain_seconds
        if len(self._rounds) >= self.CLEAR_WARMUP and plain_seconds:
            speed, plain = rate(self._rounds), 1.0 / plain_seconds
            clear = speed < self.CLEAR_SHARE * plain
            if speed < plain and (clear or len(self._rounds) >= self.WARMUP):
                self._votes = self.OFF_AFTER if clear else self._votes + 1
                if self._votes >= self.OFF_AFTER and not self.off:
                    self.off = True
                    self.note = (f"drafting through text does not pay here: {speed:.1f} tokens/s against "
                                 f"{plain:.1f} plain; off, tried again after {self.PROBE_EVERY} rounds, "
                                 "then less often")
            elif speed >= plain:
                self._votes, self.off, self.note = 0, False, ""
                self._probes.reset()
        return not self.off or self._probes.due()

    def observe(self, tokens: int, seconds: float) -> None:
        """A round drafted through text: the tokens it wrote and what it took, all in."""
        seconds = max(seconds, 1e-9)
        if self._probes.probing:
            # A probe is judged on its own round (the old ones would outvote a machine
            # that changed); one that pays turns the bridge back on, to be judged afresh.
            self._probes.probing = False
            if self._plain and tokens / seconds >= 1.0 / self._plain:
                self._rounds.clear()
                self._votes, self.off, self.note = 0, False, ""
                self._probes.reset()
        self._rounds.append((tokens, seconds))
