"""A reply's stats as charts: acceptance by draft position, and tokens/s over the reply.

Display only. ``ReplyStatsView.show_reply(stats, arrivals)`` draws what it is given:
``stats`` from the reply, ``arrivals`` the token batches as they reached the window
(``TokenArrivals``, recorded by the Compare controller). A reply restored from
history has stats but no arrival times; the speed chart then says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCharts import (
    QBarCategoryAxis,
    QBarSeries,
    QBarSet,
    QChart,
    QChartView,
    QLineSeries,
    QValueAxis,
)
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.engine.types import Stats
from app.ui.resources import token_palette
from app.ui.stats_format import message_summary
from app.ui.token_style import is_dark

RATE_WINDOW_S = 1.0  # tokens/s is averaged over the last second of arrivals


@dataclass
class TokenArrivals:
    """When a reply's tokens reached the window: (``time.perf_counter()``, tokens in the batch).

    The engine thread hands tokens over in batches (at most ~30 a second), so times
    are per batch; every token of a batch shares its batch's time.
    """

    batches: list[tuple[float, int]] = field(default_factory=list)

    def add(self, at: float, count: int) -> None:
        if count > 0:
            self.batches.append((at, count))

    @property
    def tokens(self) -> int:
        return sum(count for _, count in self.batches)


def rolling_rate(batches: list[tuple[float, int]], window: float = RATE_WINDOW_S) -> list[tuple[int, float]]:
    """(tokens so far, tokens/s over the last ``window`` seconds) after each batch but the first.

    The clock starts at the first batch (the prompt's evaluation is not generation),
    so the first batch's tokens count as already there. Early on, before a whole
    window has passed, the rate is taken since the first batch.
    """
    times, totals = [], []
    total = 0
    for at, count in batches:
        total += count
        times.append(at)
        totals.append(total)
    points = []
    start = 0  # the latest batch at least ``window`` before the current one
    for i in range(1, len(times)):
        while start + 1 < i and times[start + 1] <= times[i] - window:
            start += 1
        elapsed = times[i] - times[start]
        if elapsed > 0:
            points.append((totals[i], (totals[i] - totals[start]) / elapsed))
    return points


class ReplyStatsView(QWidget):
    """A window of its own (non-modal) with the two charts and a one-line summary."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setObjectName("replyStats")
        self.setWindowTitle("Reply stats")
        self.resize(640, 620)
        self.summary_label = QLabel(self)
        self.summary_label.setObjectName("replyStatsSummary")
        self.summary_label.setTextFormat(Qt.TextFormat.PlainText)
        self.summary_label.setWordWrap(True)
        self.acceptance_view = self._chart_view("acceptanceChart")
        self.rate_view = self._chart_view("rateChart")
        self.acceptance_set = QBarSet("acceptance")
        self.rate_series = QLineSeries()
        self.average_series = QLineSeries()
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary_label)
        layout.addWidget(self.acceptance_view, 1)
        layout.addWidget(self.rate_view, 1)

    def _chart_view(self, name: str) -> QChartView:
        view = QChartView(self)
        view.setObjectName(name)
        view.setRenderHint(QPainter.RenderHint.Antialiasing)
        view.setMinimumHeight(220)
        return view

    def show_reply(self, stats: Stats | None, arrivals: TokenArrivals | None, title: str = "") -> None:
        """Draw ``stats`` (None: the reply is still being written) and the arrival times."""
        if title:
            self.setWindowTitle(f"Reply stats — {title}")
        self.summary_label.setText(message_summary(stats) if stats is not None else "The reply is still being written.")
        palette = token_palette(is_dark(self.palette()))
        self.acceptance_view.setChart(self._acceptance_chart(stats, QColor(palette["accepted"])))
        self.rate_view.setChart(self._rate_chart(stats, arrivals, QColor(palette["bonus"])))

    # --- charts ---------------------------------------------------------------------------------

    def _acceptance_chart(self, stats: Stats | None, colour: QColor) -> QChart:
        chart = QChart()
        chart.setTitle("Acceptance by draft position")
        chart.legend().setVisible(False)
        by_position = stats.acceptance_by_position if stats is not None else []
        drafted = stats.drafted_by_position if stats is not None else []
        self.acceptance_set = QBarSet("acceptance")
        self.acceptance_set.setColor(colour)
        self.acceptance_set.append([100.0 * a for a in by_position])
        bars = QBarSeries()
        bars.append(self.acceptance_set)
        bars.setLabelsVisible(True)
        bars.setLabelsFormat("@value%")
        bars.setLabelsPrecision(3)
        chart.addSeries(bars)
        x = QBarCategoryAxis()
        # Position i is the i-th drafted token of a round; n says how often one was drafted there.
        x.append([f"{i + 1} (n={n})" for i, n in enumerate(drafted)] or [""])
        x.setTitleText("draft position (times drafted)")
        y = QValueAxis()
        y.setRange(0, 100)
        y.setLabelFormat("%d%%")
        y.setTitleText("accepted")
        chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
        bars.attachAxis(x)
        bars.attachAxis(y)
        if not by_position:
            chart.setTitle("Acceptance by draft position — nothing was drafted"
                           + (" (plain decoding)" if stats is not None and not stats.speculative else ""))
        return chart

    def _rate_chart(self, stats: Stats | None, arrivals: TokenArrivals | None, colour: QColor) -> QChart:
        chart = QChart()
        chart.setTitle(f"Tokens per second over the reply (last {RATE_WINDOW_S:g} s)")
        points = rolling_rate(arrivals.batches) if arrivals is not None else []
        self.rate_series = QLineSeries()
        self.rate_series.setName("tokens/s")
        self.rate_series.setColor(colour)
        for tokens, rate in points:
            self.rate_series.append(QPointF(tokens, rate))
        chart.addSeries(self.rate_series)
        self.average_series = QLineSeries()
        average = stats.tokens_per_second if stats is not None else 0.0
        last = max([p[0] for p in points] + [stats.tokens if stats is not None else 0])
        if average > 0:
            self.average_series.setName(f"reply average {average:.1f} tok/s")
            self.average_series.append(QPointF(0, average))
            self.average_series.append(QPointF(max(last, 1), average))
            pen = self.average_series.pen()
            pen.setStyle(Qt.PenStyle.DashLine)
            pen.setColor(QColor("#9e9e9e"))
            self.average_series.setPen(pen)
            chart.addSeries(self.average_series)
        x = QValueAxis()
        x.setRange(0, max(last, 1))
        x.setLabelFormat("%d")
        x.setTitleText("tokens written")
        y = QValueAxis()
        top = max([rate for _, rate in points] + [average, 1.0])
        y.setRange(0, top * 1.15)
        y.setLabelFormat("%.0f")
        y.setTitleText("tokens/s")
        x.applyNiceNumbers()
        y.applyNiceNumbers()
        chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
        for series in chart.series():
            series.attachAxis(x)
            series.attachAxis(y)
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        if not points:
            chart.setTitle("Tokens per second over the reply — "
                           + ("no arrival times recorded (e.g. a reply restored from history)"
                              if arrivals is None or not arrivals.batches else "too few tokens to draw"))
        return chart
