"""Can the window keep up with a fast GPU? A synthetic stream through the real signal path.

    python tools/stream_bench.py [--rate 2000] [--seconds 10] [--tokens N] [--markdown on|off]
    QT_QPA_PLATFORM=offscreen python tools/stream_bench.py     # without a display
    QT_QPA_PLATFORM=offscreen python tools/stream_bench.py --tokens 4000 --markdown off

A synthetic engine on the real worker thread yields TokenEvents at ``rate``
tokens/s in rounds, as a speculating GPU would; they travel the same mailbox ->
``EngineClient.tokens`` -> ``MainWindow`` -> ``ChatView`` path as real replies.
Meanwhile a 5 ms precise timer on the UI thread measures how late it fires: the
worst lateness is the longest the event loop was blocked. Issue 3's budget is
50 ms. Not a unit test: timings depend on the machine and its load.

The reply is Markdown of the kind a coding question gets (a heading, prose with
emphasis and inline code, a fenced code block, a nested list, a table, repeated),
drawn formatted (``--markdown on``, the window's default) or as coloured source
(``off``), so the two costs can be set side by side.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout's app

from PySide6.QtCore import QEvent, QEventLoop, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication

from app.bridge.models import ChatPrompt, LoadInfo
from app.bridge.worker import EngineClient
from app.engine.speculative import Generation
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig, Stats, StopReason, TokenEvent, TokenKind
from app.vocabulary import MessageState

TICK_MS = 5
BUDGET_MS = 50.0
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


class SyntheticModels:
    def __init__(self, rate: float, seconds: float, tokens: int | None = None) -> None:
        self.engine = SyntheticEngine(rate, seconds, tokens)
        self.info = LoadInfo(target_name="synthetic stream", target_path="", drafter=DrafterKind.MODEL,
                             draft_name="synthetic draft", speculation_available=True)

    def prompt(self, history: Sequence[tuple[str, str]], system_prompt: str, max_tokens: int) -> ChatPrompt:
        return ChatPrompt([1])

    def close(self) -> None:
        pass


class _PaintCounter(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


@dataclass
class StreamBenchResult:
    rate: float
    seconds: float            # wall time of the reply
    tokens: int               # tokens that reached the chat view
    batches: int              # token batches the view received
    paints: int               # repaints of the streaming message
    worst_stall_ms: float     # the event loop's longest block (timer lateness)
    p99_stall_ms: float
    markdown: bool = True     # drawn formatted (else as coloured source)

    @property
    def batches_per_second(self) -> float:
        return self.batches / self.seconds if self.seconds else 0.0

    @property
    def paints_per_second(self) -> float:
        return self.paints / self.seconds if self.seconds else 0.0

    def report(self) -> str:
        verdict = "within" if self.worst_stall_ms <= BUDGET_MS else "OVER"
        return (f"{self.tokens} tokens in {self.seconds:.2f} s at {self.rate:.0f} tokens/s requested, "
                f"Markdown {'on' if self.markdown else 'off'}: "
                f"{self.batches_per_second:.1f} batches/s, {self.paints_per_second:.1f} repaints/s; "
                f"worst event-loop stall {self.worst_stall_ms:.1f} ms (p99 {self.p99_stall_ms:.1f} ms), "
                f"{verdict} the {BUDGET_MS:.0f} ms budget")


def run_stream_bench(rate: float = 2000.0, seconds: float = 10.0, *, show: bool = True,
                     tokens: int | None = None, markdown: bool = True) -> StreamBenchResult:
    """Stream ``rate`` tokens/s for ``seconds`` (or ``tokens`` tokens) into a real MainWindow;
    needs a QApplication."""
    from app.storage.settings import LoadedSettings, Settings
    from app.window.main_window import MainWindow

    app = QApplication.instance()
    assert app is not None, "create a QApplication first"
    total = tokens if tokens is not None else int(rate * seconds)
    seconds = total / rate
    client = EngineClient(loader=lambda spec, progress: SyntheticModels(rate, seconds, total))
    settings = Settings(target_path="synthetic", max_tokens=total + ROUND)
    window = MainWindow(LoadedSettings(settings, None), client=client)
    window.chat_view.set_markdown(markdown)
    if show:
        window.show()
    try:
        _wait_until(lambda: client.info is not None, 10.0)
        batches, tokens = [0], [0]

        def count(request_id: int, events: list, stats: object) -> None:
            batches[0] += 1
            tokens[0] += len(events)

        client.tokens.connect(count)
        gaps: list[float] = []
        last = [time.perf_counter()]

        def tick() -> None:
            now = time.perf_counter()
            gaps.append(now - last[0])
            last[0] = now

        ticker = QTimer()
        ticker.setTimerType(Qt.TimerType.PreciseTimer)
        ticker.setInterval(TICK_MS)
        ticker.timeout.connect(tick)
        started = time.perf_counter()
        reply = window.send("stream")
        counter = _PaintCounter()
        reply.installEventFilter(counter)  # the reply's frame repaints whenever its text does
        last[0] = time.perf_counter()
        ticker.start()
        loop = QEventLoop()  # the real event loop, as the app runs it
        window.reply_finished.connect(loop.quit)
        QTimer.singleShot(int((seconds * 3 + 10) * 1000), loop.quit)
        if reply.status == MessageState.STREAMING:
            loop.exec()
        ticker.stop()
        if reply.status == MessageState.STREAMING:
            raise TimeoutError("the synthetic stream did not finish in time")
        elapsed = time.perf_counter() - started
        lateness = sorted(max(0.0, g * 1000 - TICK_MS) for g in gaps) or [0.0]
        p99 = lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))]
        return StreamBenchResult(rate=rate, seconds=elapsed, tokens=tokens[0], batches=batches[0],
                                 paints=counter.paints, worst_stall_ms=lateness[-1], p99_stall_ms=p99,
                                 markdown=markdown)
    finally:
        window.close()
        window.deleteLater()


def _wait_until(condition, timeout_s: float) -> None:
    app = QApplication.instance()
    deadline = time.perf_counter() + timeout_s
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError("the synthetic stream did not finish in time")
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="tokens per second (default 2000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the stream (default 10)")
    parser.add_argument("--tokens", type=int, default=None, help="length of the stream in tokens (instead of --seconds)")
    parser.add_argument("--markdown", choices=("on", "off"), default="on",
                        help="draw the reply formatted (on, the default) or as coloured source (off)")
    args = parser.parse_args(argv)
    # Never touch the user's settings: the window saves its geometry on close.
    os.environ.setdefault("TANDEM_HOME", tempfile.mkdtemp(prefix="tandem-stream-bench-"))
    app = QApplication.instance() or QApplication(sys.argv[:1])
    result = run_stream_bench(args.rate, args.seconds, tokens=args.tokens, markdown=args.markdown == "on")
    print(result.report())
    return 0 if result.worst_stall_ms <= BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
