"""Can the window keep up with a fast GPU? A synthetic stream through the real signal path.

    python tools/stream_bench.py [--rate 2000] [--seconds 10] [--tokens N] [--markdown on|off]
                                 [--engine process|thread]
    QT_QPA_PLATFORM=offscreen python tools/stream_bench.py     # without a display
    QT_QPA_PLATFORM=offscreen python tools/stream_bench.py --tokens 4000 --markdown off

A synthetic session in the real engine host (on a thread, or in its own process)
yields TokenEvents at ``rate`` tokens/s in rounds, as a speculating GPU would; they
travel the same channel -> ``EngineProcessClient.tokens`` -> ``MainWindow`` ->
``ChatView`` path as real replies.
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
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout's app

from PySide6.QtCore import QEvent, QEventLoop, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication

from app.bridge.engine_process import EngineProcessClient
from app.enginehost.thread_link import thread_link
from app.session import protocol
from app.vocabulary import MessageState

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synthetic_stream import ROUND, SyntheticModels, markdown_pieces  # noqa: E402,F401
import synthetic_stream  # noqa: E402

TICK_MS = 5
BUDGET_MS = 50.0


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
        return (f"{self.tokens} tokens in {self.seconds:.2f} s at {self.rate:.0f} tokens/s requested "
                f"({self.tokens / self.seconds if self.seconds else 0:.0f} delivered), "
                f"Markdown {'on' if self.markdown else 'off'}: "
                f"{self.batches_per_second:.1f} batches/s, {self.paints_per_second:.1f} repaints/s; "
                f"worst event-loop stall {self.worst_stall_ms:.1f} ms (p99 {self.p99_stall_ms:.1f} ms), "
                f"{verdict} the {BUDGET_MS:.0f} ms budget")


def run_stream_bench(rate: float = 2000.0, seconds: float = 10.0, *, show: bool = True,
                     tokens: int | None = None, markdown: bool = True, engine: str = "thread") -> StreamBenchResult:
    """Stream ``rate`` tokens/s for ``seconds`` (or ``tokens`` tokens) into a real MainWindow;
    needs a QApplication. ``engine``: the engine host on a thread of this process
    ("thread") or in a real engine process ("process", as the app runs: every batch
    crosses a process boundary)."""
    from app.storage.settings import LoadedSettings, Settings
    from app.window.main_window import MainWindow

    app = QApplication.instance()
    assert app is not None, "create a QApplication first"
    total = tokens if tokens is not None else int(rate * seconds)
    seconds = total / rate
    if engine == "process":
        env = dict(os.environ, **{protocol.TEST_HOOKS: "1",
                                  protocol.TEST_LOADER: f"{synthetic_stream.__file__}:load_synthetic",
                                  synthetic_stream.STREAM_ENV: f"{rate},{total}"})
        client = EngineProcessClient(env=env)
    else:
        client = EngineProcessClient(start_link=thread_link(lambda spec, progress: SyntheticModels(rate, seconds,
                                                                                                   total)))
    settings = Settings(target_path="synthetic", max_tokens=total + ROUND)
    window = MainWindow(LoadedSettings(settings, None), client=client)
    window.chat_view.set_markdown(markdown)
    if show:
        window.show()
    try:
        _wait_until(lambda: client.info is not None, 60.0)
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
    parser.add_argument("--engine", choices=("thread", "process"), default="process",
                        help="the synthetic engine in an engine process, as the app runs (default), or on "
                             "the window's own engine thread, as before the engine had a process")
    args = parser.parse_args(argv)
    # Never touch the user's settings: the window saves its geometry on close.
    os.environ.setdefault("TANDEM_HOME", tempfile.mkdtemp(prefix="tandem-stream-bench-"))
    app = QApplication.instance() or QApplication(sys.argv[:1])
    result = run_stream_bench(args.rate, args.seconds, tokens=args.tokens, markdown=args.markdown == "on",
                              engine=args.engine)
    print(result.report())
    return 0 if result.worst_stall_ms <= BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
