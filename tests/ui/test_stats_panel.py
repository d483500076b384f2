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


def test_the_split_rows_show_only_for_a_target_on_workers(qtbot):
    from app.session.chat import LoadInfo

    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_models(LoadInfo(target_name="t", target_path="/t.gguf"))
    assert not panel.layers_label.isVisible() and not panel.target_round_label.isVisible()
    panel.show_models(LoadInfo(target_name="t", target_path="/t.gguf", workers=("10.0.0.2:50052",),
                               layers=(("10.0.0.2:50052", 20), ("here", 10))))
    assert panel.layers_label.isVisible() and panel.layers_label.text() == "20 on 10.0.0.2:50052, 10 here"
    panel.show_stats(Stats(tokens=12, rounds=4, target_seconds=0.2, seconds=0.3, speculative=True), live=False)
    assert panel.target_round_label.text() == "50 ms (network share not measured)"
    # With the hello's round trip to each worker, measured before the load: one per
    # worker per target pass, so two workers at 5 ms make 10 ms of the round's 50.
    panel.show_models(LoadInfo(target_name="t", target_path="/t.gguf", workers=("a:1", "b:2"),
                               layers=(("a:1", 10), ("b:2", 10), ("here", 0)), worker_rtt=(0.005, 0.005)))
    panel.show_stats(Stats(tokens=12, rounds=4, target_seconds=0.2, seconds=0.3, speculative=True), live=False)
    assert panel.target_round_label.text() == "50 ms, network ≈ 10.0 ms (20%)"
    panel.show_models(None, "loading…")
    assert not panel.layers_label.isVisible()
