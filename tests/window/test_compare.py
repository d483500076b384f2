"""In-app Compare and the reply stats view: a reply's turn re-run without speculation."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.engine.types import SamplingConfig, SpecConfig, Stats, TokenEvent, TokenKind
from app.storage.settings import Settings
from app.session.compare import IDENTICAL, Comparison, first_difference
from app.window.compare_controller import COMPARE_LABEL, STATS_LABEL, install_compare
from app.ui.reply_charts import rolling_rate

from window_fixtures import REPLY_TIMEOUT_MS, demo_settings, send_and_wait, wait_loaded
from bridge.fakes import ScriptedLoader, tokens

SCRIPTED = Settings(target_path="/models/scripted.gguf", draft_path="/models/scripted-draft.gguf",
                    temperature=0.7, seed=42, max_tokens=30, system_prompt="Be brief.")
PROMPT = "Write a haiku about the sea."


def click(qtbot, button) -> None:
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


@pytest.fixture
def scripted(make_window, qtbot):
    def make(events=tokens("Hello", " there", "!"), *, delay=0.0, settings=SCRIPTED):
        loader = ScriptedLoader(events, delay=delay)
        window = make_window(settings, loader=loader)
        wait_loaded(qtbot, window)
        return window, install_compare(window), loader

    return make


# --- the words, without a window --------------------------------------------------------------

def test_first_difference_names_the_position_and_both_tokens():
    same = [TokenEvent(1, "a", TokenKind.ACCEPTED), TokenEvent(2, " b", TokenKind.BONUS)]
    assert first_difference(same, [TokenEvent(1, "a", TokenKind.PLAIN), TokenEvent(2, " b", TokenKind.PLAIN)]) is None
    other = [TokenEvent(1, "a", TokenKind.PLAIN), TokenEvent(3, " c", TokenKind.PLAIN)]
    d = first_difference(same, other)
    assert (d.index, d.spec_text, d.spec_id, d.plain_text, d.plain_id) == (1, " b", 2, " c", 3)
    shorter = first_difference(same, same[:1])
    assert (shorter.index, shorter.plain_text) == (1, None)
    # Without token ids (a restored reply), the texts decide.
    restored = [TokenEvent(-1, "a", TokenKind.PLAIN), TokenEvent(-1, " b", TokenKind.PLAIN)]
    assert first_difference(restored, other[:1] + [TokenEvent(9, " b", TokenKind.PLAIN)]) is None


def test_a_greedy_difference_is_called_a_near_tie_with_both_tokens():
    spec = [TokenEvent(5, "The", TokenKind.ACCEPTED), TokenEvent(6, " sea", TokenKind.CORRECTED)]
    plain = [TokenEvent(5, "The", TokenKind.PLAIN), TokenEvent(7, " ocean\n", TokenKind.PLAIN)]
    comparison = Comparison(SamplingConfig(temperature=0.0), Stats(tokens=2, seconds=0.1, speculative=True),
                            Stats(tokens=2, seconds=0.2), "The sea", "The ocean\n",
                            first_difference(spec, plain))
    assert not comparison.identical and comparison.speedup == pytest.approx(2.0)
    assert "near-tie" in comparison.verdict and "token 2" in comparison.verdict
    assert "F32/F16" in comparison.explanation and "batch" in comparison.explanation
    assert comparison.difference_detail == ("First difference at token 2: speculative “ sea” (token 6), "
                                            "plain “ ocean↵” (token 7).")


def test_rolling_rate_counts_tokens_after_the_first_batch_over_the_last_second():
    batches = [(10.0, 3), (10.5, 5), (11.0, 5), (12.0, 20)]
    assert rolling_rate(batches) == [(8, 10.0), (13, 10.0), (33, 20.0)]
    assert rolling_rate(batches[:1]) == []


# --- the window, with a scripted engine -------------------------------------------------------

def test_compare_reruns_the_same_turn_without_speculation(scripted, qtbot):
    window, compare, loader = scripted()
    reply = send_and_wait(qtbot, window, "hi")
    # Settings changed after the reply: Compare still asks with the reply's own.
    window.apply_settings(window.settings.replace(temperature=0.0, seed=-1, max_tokens=99))
    with qtbot.waitSignal(compare.comparison_finished, timeout=REPLY_TIMEOUT_MS) as done:
        click(qtbot, reply.action_buttons[COMPARE_LABEL])
    sampling, spec, max_tokens = loader.engine.calls[-1]
    assert sampling == SamplingConfig(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, seed=42)
    assert spec == SpecConfig(enabled=False) and max_tokens == 30
    assert loader.models.histories[-1] == (("user", "hi"),)

    comparison = done.args[0]
    dialog = compare.dialog
    assert dialog.isVisible() and not dialog.isModal()
    assert comparison.identical and comparison.plain_text == reply.text() == "Hello there!"
    assert dialog.verdict_label.text().startswith("Identical")
    # At temperature > 0 the dialog says why texts may differ even when they did not.
    assert "expected to differ" in dialog.explanation_label.text()
    assert "same seed" in dialog.explanation_label.text()
    assert window.chat_view.messages()[-1] is reply  # the plain run never lands in the chat


def test_compare_is_disabled_while_a_reply_is_written(scripted, qtbot):
    window, compare, _ = scripted(tokens(*["tok "] * 20), delay=0.02)
    reply = window.send("go")
    assert not reply.action_buttons[COMPARE_LABEL].isEnabled()
    assert reply.action_buttons[STATS_LABEL].isEnabled()
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT_MS):
        pass
    assert reply.action_buttons[COMPARE_LABEL].isEnabled()
    assert compare.compare_last_action is not None and compare.compare_last_action.isEnabled()
    assert install_compare(window) is compare  # installing twice adds nothing

    compare.stats_action.trigger()  # View ▸ Last reply's stats
    view = compare.stats_view
    assert view.isVisible() and view.acceptance_set.count() == 0  # the scripted engine drafts nothing
    assert view.rate_series.count() >= 1


def test_compare_shows_progress_and_can_be_cancelled(scripted, qtbot):
    window, compare, loader = scripted(tokens(*["tok "] * 30), delay=0.03)
    reply = send_and_wait(qtbot, window, "count")
    click(qtbot, reply.action_buttons[COMPARE_LABEL])
    dialog = compare.dialog
    assert compare.running and dialog.cancel_button.isVisible()
    assert not reply.action_buttons[COMPARE_LABEL].isEnabled()  # one generation at a time
    qtbot.waitUntil(lambda: dialog.progress.value() >= 2, timeout=REPLY_TIMEOUT_MS)
    assert "Plain decoding: " in dialog.progress_label.text()
    with qtbot.waitSignal(compare.comparison_cancelled, timeout=REPLY_TIMEOUT_MS) as cancelled:
        click(qtbot, dialog.cancel_button)
    assert 2 <= cancelled.args[0] < 30
    assert not compare.running and not window.client.busy
    assert dialog.verdict_label.text() == "Comparison cancelled."
    assert not dialog.cancel_button.isVisible() and not dialog.figures.isVisible()
    assert reply.action_buttons[COMPARE_LABEL].isEnabled()


def test_a_reply_without_speculation_is_not_compared(scripted, qtbot):
    window, compare, loader = scripted()
    window.speculation_action.trigger()
    reply = send_and_wait(qtbot, window, "hi")
    calls = len(loader.engine.calls)
    assert compare.compare(reply) is None and len(loader.engine.calls) == calls
    assert "without speculation" in compare.dialog.verdict_label.text()


# --- the real demo pair -----------------------------------------------------------------------

def test_real_pair_greedy_is_identical_sampled_differs_as_expected_and_stats_open(
        make_window, demo_models, qtbot):
    window = make_window(demo_settings(demo_models, max_tokens=32))
    compare = install_compare(window)
    wait_loaded(qtbot, window)

    # Temperature 0: the same text, and the speed-up is spec / plain.
    reply = send_and_wait(qtbot, window, PROMPT)
    assert reply.stats.speculative and reply.stats.drafted > 0
    with qtbot.waitSignal(compare.comparison_finished, timeout=REPLY_TIMEOUT_MS) as done:
        click(qtbot, reply.action_buttons[COMPARE_LABEL])
    comparison = done.args[0]
    assert comparison.identical, comparison.difference_detail
    assert comparison.plain_text == reply.text() and comparison.plain_stats.speculative is False
    assert comparison.spec_stats is reply.stats
    speedup = reply.stats.tokens_per_second / comparison.plain_stats.tokens_per_second
    assert comparison.speedup == pytest.approx(speedup)
    dialog = compare.dialog
    assert dialog.verdict_label.text() == IDENTICAL
    assert dialog.speedup_label.text().startswith(f"{speedup:.2f}×")
    assert dialog.acceptance_label.text().startswith(f"{reply.stats.acceptance * 100:.0f}%")

    # The stats view: one bar per draft position, and a tokens/s curve.
    click(qtbot, reply.action_buttons[STATS_LABEL])
    view = compare.stats_view
    assert view.isVisible()
    positions = len(reply.stats.acceptance_by_position)
    assert positions >= 1 and view.acceptance_set.count() == positions
    assert view.acceptance_set.at(0) == pytest.approx(100 * reply.stats.acceptance_by_position[0])
    assert view.rate_series.count() >= 1

    # Temperature > 0: the dialog explains that different texts are expected.
    window.apply_settings(window.settings.replace(temperature=0.9, max_tokens=12))  # short: the words matter here
    sampled = send_and_wait(qtbot, window, "And one about the mountains.")
    with qtbot.waitSignal(compare.comparison_finished, timeout=REPLY_TIMEOUT_MS) as done:
        click(qtbot, sampled.action_buttons[COMPARE_LABEL])
    explanation = dialog.explanation_label.text()
    assert "expected to differ" in explanation and "distribution" in explanation
    if not done.args[0].identical:
        assert "expected at temperature 0.9" in dialog.verdict_label.text()
