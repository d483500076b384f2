"""The side panel's figures for a reply."""

from __future__ import annotations

from app.engine.types import Stats
from app.ui.stats_panel import StatsPanel


def test_copied_guesses_are_told_apart_from_drafted_ones(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.show_stats(Stats(tokens=40, rounds=6, drafted=30, accepted=27, speculative=True), live=False)
    assert panel.drafted_label.text() == "27 / 30"
    panel.show_stats(Stats(tokens=40, rounds=6, drafted=30, accepted=27, copied=12, copied_accepted=11,
                           speculative=True), live=True)
    assert panel.drafted_label.text() == "27 / 30 (copied: 11 / 12)"
    assert panel.acceptance_label.text() == "90%"
