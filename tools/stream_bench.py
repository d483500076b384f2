"""Can the window keep up with a fast GPU? A synthetic stream through the real signal path.

    python tools/stream_bench.py [--rate 2000] [--seconds 10]
    QT_QPA_PLATFORM=offscreen python tools/stream_bench.py     # without a display

A synthetic engine on the real worker thread yields TokenEvents at ``rate``
tokens/s in rounds, as a speculating GPU would; they travel the same mailbox ->
``EngineClient.tokens`` -> ``MainWindow`` -> ``ChatView`` path as real replies.
Meanwhile a 5 ms precise timer on the UI thread measures how late it fires: the
worst lateness is the longest the event loop was blocked. Issue 3's budget is
50 ms. Not a unit test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
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
_WORDS = ("the", "draft", "model", "guesses", "and", "target", "verifies", "every", "token", "in",
          "one", "batch", "so", "<b>markup</b>", "stays", "literal", "while", "colours", "show", "what",
          "happened", "to", "each", "piece", "of", "text", "café", "数据", "🙂")


class SyntheticEngine:
    """Yields ``rate`` tokens per second (in rounds of ROUND) until cancelled or ``seconds`` pass."""

    def __init__(self, rate: float, seconds: float) -> None:
        self.rate = rate
        self.seconds = seconds

    def generate(self, prompt: Sequence[int], sampling: SamplingConfig, spec: SpecConfig,
                 max_tokens: int, cancel: threading.Event) -> Generation:
        stats = Stats(prompt_tokens=len(prompt), speculative=True)
        return Generation(self._events(min(max_tokens, int(self.rate * self.seconds)), cancel, stats), stats)

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

    @staticmethod
    def _token(n: int, in_round: int) -> TokenEvent:
        text = (" " if n % 61 else "\n") + _WORDS[(n * 7) % len(_WORDS)]
        if in_round < ROUND - 1:
            return TokenEvent(n, text, TokenKind.ACCEPTED)
        if n % 4:
            return TokenEvent(n, text, TokenKind.BONUS)
        return TokenEvent(n, text, TokenKind.CORRECTED, draft_id=0, draft_text=" <i>guess", draft_prob=0.4)


class SyntheticModels:
    def __init__(self, rate: float, seconds: float) -> None:
        self.engine = SyntheticEngine(rate, seconds)
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

    @property
    def batches_per_second(self) -> float:
        return self.batches / self.seconds if self.seconds else 0.0

    @property
    def paints_per_second(self) -> float:
        return self.paints / self.seconds if self.seconds else 0.0

    def report(self) -> str:
        verdict = "within" if self.worst_stall_ms <= BUDGET_MS else "OVER"
        return (f"{self.tokens} tokens in {self.seconds:.2f} s at {self.rate:.0f} tokens/s requested: "
                f"{self.batches_per_second:.1f} batches/s, {self.paints_per_second:.1f} repaints/s; "
                f"worst event-loop stall {self.worst_stall_ms:.1f} ms (p99 {self.p99_stall_ms:.1f} ms), "
                f"{verdict} the {BUDGET_MS:.0f} ms budget")


def run_stream_bench(rate: float = 2000.0, seconds: float = 10.0, *, show: bool = True) -> StreamBenchResult:
    """Stream ``rate`` tokens/s for ``seconds`` into a real MainWindow; needs a QApplication."""
    from app.storage.settings import LoadedSettings, Settings
    from app.window.main_window import MainWindow

    app = QApplication.instance()
    assert app is not None, "create a QApplication first"
    client = EngineClient(loader=lambda spec, progress: SyntheticModels(rate, seconds))
    settings = Settings(target_path="synthetic", max_tokens=int(rate * seconds) + ROUND)
    window = MainWindow(LoadedSettings(settings, None), client=client)
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
        reply.text_view.viewport().installEventFilter(counter)
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
                                 paints=counter.paints, worst_stall_ms=lateness[-1], p99_stall_ms=p99)
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
    args = parser.parse_args(argv)
    # Never touch the user's settings: the window saves its geometry on close.
    os.environ.setdefault("TANDEM_HOME", tempfile.mkdtemp(prefix="tandem-stream-bench-"))
    app = QApplication.instance() or QApplication(sys.argv[:1])
    result = run_stream_bench(args.rate, args.seconds)
    print(result.report())
    return 0 if result.worst_stall_ms <= BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
