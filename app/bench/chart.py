"""The bench report as a chart: speed-up (bars) and acceptance (line) per category.

Rendered with QtCharts on an offscreen surface, so it works headless.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from PySide6.QtCharts import (QBarCategoryAxis, QBarSeries, QBarSet, QChart, QChartView,
                              QLineSeries, QValueAxis)
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QApplication


_GREEN = "#2f7d32"  # auto's, or the one setting's, speed-up
_SETTING_COLOURS = ("#9e9e9e", "#8d6e63", "#5c6bc0", "#00897b", "#f9a825", "#6d4c41")


def _bar_set(name: str, colour: str, values: list[float]) -> QBarSet:
    bar = QBarSet(name)
    bar.setColor(QColor(colour))
    bar.append(values)
    return bar


def build_chart(report: dict) -> QChart:
    """``report`` is {setting: {"by_category", "overall"}}. One setting: its speed-up
    next to the ideal. Several: every setting's speed-up side by side, auto in green.
    The acceptance line is auto's when it ran, else the first setting's."""
    setting = "auto" if "auto" in report else next(iter(report))
    result = report[setting]
    rows = list(result["by_category"].items()) + [("overall", result["overall"])]
    categories = [name for name, _ in rows]

    bars = QBarSeries()
    if len(report) == 1:
        bars.append(_bar_set("speed-up (×)", _GREEN, [r["speedup"] for _, r in rows]))
        bars.append(_bar_set("ideal (×)", _SETTING_COLOURS[0], [r["ideal_speedup"] for _, r in rows]))
        title = f"Speculative vs plain decoding (draft_max={setting}, greedy)"
        top = max(r["ideal_speedup"] for _, r in rows)
    else:
        colours = itertools.cycle(_SETTING_COLOURS)
        top = 0.0
        for name, other in report.items():
            values = [*(other["by_category"].get(c, {}).get("speedup", 0.0) for c in categories[:-1]),
                      other["overall"]["speedup"]]
            bars.append(_bar_set(f"draft_max={name}", _GREEN if name == "auto" else next(colours), values))
            top = max(top, *values)
        title = "Speed-up over plain decoding by draft setting (greedy)"

    acceptance = QLineSeries()
    acceptance.setName(f"acceptance (draft_max={setting})")
    acceptance.setColor(QColor("#1565c0"))
    for i, (_, r) in enumerate(rows):
        acceptance.append(QPointF(i, r["acceptance"]))

    chart = QChart()
    chart.setTitle(title)
    chart.addSeries(bars)
    chart.addSeries(acceptance)
    x = QBarCategoryAxis()
    x.append(categories)
    x.setLabelsAngle(-45)
    chart.addAxis(x, Qt.AlignBottom)
    y = QValueAxis()
    y.setRange(0, max(2.0, top * 1.1))
    y.setTitleText("speed-up (×)")
    chart.addAxis(y, Qt.AlignLeft)
    y2 = QValueAxis()
    y2.setRange(0, 1.0)
    y2.setTitleText("acceptance")
    chart.addAxis(y2, Qt.AlignRight)
    bars.attachAxis(x)
    bars.attachAxis(y)
    acceptance.attachAxis(x)
    acceptance.attachAxis(y2)
    chart.legend().setAlignment(Qt.AlignBottom)
    return chart


def save_chart(report: dict, path: Path, size: tuple[int, int] = (1100, 600)) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = QApplication.instance() or QApplication([])
    view = QChartView(build_chart(report))
    view.setRenderHint(QPainter.Antialiasing)
    view.resize(*size)
    if not view.grab().save(str(path)):
        from app.errors import TandemError

        raise TandemError(f"Could not write the chart to {path}")
    del app
