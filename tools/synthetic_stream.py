"""A synthetic stream, without Qt: what tools/stream_bench.py streams into the window, on the
window's engine thread or in a real engine process (``load_synthetic``, named by the bench
through the engine's test-only loader hook).

A synthetic engine yields TokenEvents at ``rate`` tokens/s in rounds, as a speculating
GPU would; the reply is Markdown of the kind a coding question gets.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Iterator, Sequence

from app.engine.speculation.speculative import Generation
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig, Stats, StopReason, TokenEvent, TokenKind
from app.session.chat import ChatPrompt, LoadInfo

STREAM_ENV = "TANDEM_SYNTHETIC_STREAM"  # "rate,tokens" for load_synthetic in an engine process

ROUND = 6  # tokens per synthetic round: a well-accepted 5-token draft plus the bonus
# One section of the synthetic reply; sections repeat (numbered) until the reply is long enough.
SECTION = """## Step {n}: reverse a string

Here is **one way** to do it, with `slicing` and a *loop* (see [the docs](https://docs.python.org/3/)):

```python
def reverse_{n}(text: str) -> str:
    \"\"\"Return the text backwards.\"\"\"
    out = []
    for ch in text:
        out.insert(0, ch)  # <b>markup</b> stays literal
    return "".join(out)
```

- Slicing walks the string **from the end**.
- A loop builds a new list:
  1. take each character
  2. put it first

| Method | Speed | Notes |
|--------|------:|-------|
| slice  | fast  | idiomatic |
| loop   | slow  | café, 数据, 🙂 |

"""
_PIECES = re.compile(r"\s*\S+")


class SyntheticEngine:
    """Yields ``rate`` tokens per second (in rounds of ROUND) until cancelled or ``seconds`` pass."""

    def __init__(self, rate: float, seconds: float, tokens: int | None = None) -> None:
        self.rate = rate
        self.seconds = seconds
        self.total = tokens if tokens is not None else int(rate * seconds)
        self._texts = markdown_pieces(self.total)

    def generate(self, prompt: Sequence[int], sampling: SamplingConfig, spec: SpecConfig,
                 max_tokens: int, cancel: threading.Event, **_: object) -> Generation:
        stats = Stats(prompt_tokens=len(prompt), speculative=True)
        return Generation(self._events(min(max_tokens, self.total), cancel, stats), stats)

    def _events(self, total: int, cancel: threading.Event, stats: Stats) -> Iterator[TokenEvent]:
        started = time.perf_counter()
        emitted = 0
        while emitted < total:
            if cancel.is_set():
                stats.stop_reason = StopReason.CANCELLED
                return
            delay = started + (emitted + ROUND) / self.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            stats.rounds += 1
            for i in range(min(ROUND, total - emitted)):
                yield self._token(emitted, i)
                emitted += 1
                stats.tokens = emitted
                stats.seconds = time.perf_counter() - started
            stats.drafted += ROUND - 1
            stats.accepted += ROUND - 1 if stats.rounds % 4 else ROUND - 3
        stats.stop_reason = StopReason.MAX_TOKENS

    def _token(self, n: int, in_round: int) -> TokenEvent:
        text = self._texts[n]
        if in_round < ROUND - 1:
            return TokenEvent(n, text, TokenKind.ACCEPTED)
        if n % 4:
            return TokenEvent(n, text, TokenKind.BONUS)
        return TokenEvent(n, text, TokenKind.CORRECTED, draft_id=0, draft_text=" <i>guess", draft_prob=0.4)


def markdown_pieces(total: int) -> list[str]:
    """``total`` token texts (a word and the space or newline before it) of the synthetic reply."""
    pieces: list[str] = []
    section = 0
    while len(pieces) < total:
        pieces += _PIECES.findall(SECTION.format(n=section))
        section += 1
    return pieces[:total]


class NoStatesTarget:
    """A target whose cache the chats' kept states pass by."""

    keeps_states = False
    tokens: list[int] = []


class SyntheticModels:
    """A loaded session as the engine host uses one (``app.session.chat.ChatSession``)."""

    def __init__(self, rate: float, seconds: float, tokens: int | None = None) -> None:
        self.engine = SyntheticEngine(rate, seconds, tokens)
        self.target = NoStatesTarget()
        self.info = LoadInfo(target_name="synthetic stream", target_path="", drafter=DrafterKind.MODEL,
                             draft_name="synthetic draft", speculation_available=True)

    def prompt(self, history: Sequence[tuple[str, str]], system_prompt: str, max_tokens: int,
               cancel: threading.Event | None = None) -> ChatPrompt:
        return ChatPrompt([1])

    def close(self) -> None:
        pass

    def generate(self, prompt: ChatPrompt, sampling: SamplingConfig, spec: SpecConfig, max_tokens: int,
                 cancel: threading.Event | None = None, **_: object) -> Generation:
        """As ``ChatSession.generate``: the engine process's call."""
        return self.engine.generate(prompt.tokens, sampling, spec, max_tokens, cancel or threading.Event())


def load_synthetic(spec, progress) -> SyntheticModels:
    """The engine process's loader for the bench: rate and length from ``STREAM_ENV``."""
    rate, tokens = os.environ.get(STREAM_ENV, "2000,20000").split(",")
    return SyntheticModels(float(rate), int(tokens) / float(rate), int(tokens))
