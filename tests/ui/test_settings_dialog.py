"""The settings dialog on its own: every field shows and returns its value."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from app.storage.settings import Settings, options
from app.ui.settings_dialog import SettingsDialog


@pytest.fixture
def make_dialog(qtbot):
    def make(settings: Settings) -> SettingsDialog:
        dialog = SettingsDialog(settings)
        qtbot.addWidget(dialog)
        return dialog

    return make


def test_every_setting_but_window_state_has_an_editor_with_its_description(make_dialog):
    dialog = make_dialog(Settings())
    declared = {o.name: o.description for o in options()}
    assert set(dialog.editors) == set(declared) - {"window_geometry", "show_colours", "system_prompt_presets",
                                                    "library_folders", "recent_pairs",  # kept by their own windows
                                                    "text_zoom", "side_panel_visible", "splitter_state",
                                                    "server_port"}
    for name, editor in dialog.editors.items():
        assert editor.toolTip() == declared[name]


def test_values_round_trip(make_dialog):
    settings = Settings(target_path="/m/t.gguf", draft_path="/m/d.gguf", drafter="lookup", speculation=False,
                        draft_max=7, draft_min=2, p_min=0.35, copy_repeats=False, target_gpu_layers=20, draft_gpu_layers=0,
                        n_ctx=8192, n_threads=6, temperature=1.25, top_k=0, top_p=0.5, min_p=0.1, seed=42,
                        max_tokens=300, system_prompt="Line one\nline <two>", show_colours=False,
                        window_geometry="AAAA", rpc_workers="192.168.1.20:50052,box:7", tensor_split="3,1")
    assert make_dialog(settings).settings() == settings
    assert make_dialog(Settings()).settings() == Settings()


def test_special_values_read_as_words(make_dialog):
    dialog = make_dialog(Settings(seed=-1, top_k=0, n_threads=0, target_gpu_layers=-1))
    assert dialog.editors["draft_max"].text() == "auto"
    assert dialog.editors["seed"].text() == "random"
    assert dialog.editors["top_k"].text() == "off"
    assert dialog.editors["n_threads"].text() == "automatic"
    assert dialog.editors["target_gpu_layers"].text() == "all"


def test_lookup_drafter_disables_the_draft_model_fields(make_dialog):
    dialog = make_dialog(Settings(drafter="lookup"))
    assert not dialog.editors["draft_path"].isEnabled()
    assert not dialog.editors["copy_repeats"].isEnabled()  # lookup copies anyway
    assert "needs no draft model" in dialog.compat_label.text()
    dialog.editors["drafter"].setCurrentIndex(0)
    assert dialog.editors["draft_path"].isEnabled()
    assert dialog.editors["copy_repeats"].isEnabled()


def test_a_pair_check_is_requested_once_typing_settles(make_dialog, qtbot):
    dialog = make_dialog(Settings())
    with qtbot.waitSignal(dialog.compatibility_check_requested, timeout=5000) as asked:
        dialog.editors["target_path"].setText("/m/t.gguf")
        dialog.editors["draft_path"].setText("/m/d.gguf")
    assert asked.args == ["/m/t.gguf", "/m/d.gguf"]
    dialog.show_compatibility("/m/other.gguf", "/m/d.gguf", True, None, "stale answer")
    assert "stale" not in dialog.compat_label.text()
    dialog.show_compatibility("/m/t.gguf", "/m/d.gguf", False, "vocab_size", "Draft is incompatible: sizes")
    assert dialog.compat_label.text() == "✗ Draft is incompatible: sizes (rule: vocab_size)"


def test_ok_with_an_invalid_value_keeps_the_dialog_open_and_says_why(make_dialog, monkeypatch):
    dialog = make_dialog(Settings())
    monkeypatch.setattr(dialog, "values", lambda: {"draft_min": 0})
    dialog.show()
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert dialog.isVisible()
    assert "draft_min" in dialog.error_label.text()


@pytest.mark.parametrize("scale", [1.0, 1.6])  # 1.6: the larger fonts of another desktop
def test_the_dialog_is_as_big_as_its_labels_on_every_page(make_dialog, qapp, scale):
    """Nothing cut off ("Stop drafting below p…"): each page's labels, check boxes and
    fields get the room they ask for, even where the screen is small (a window sizing
    itself is kept to 2/3 of the screen)."""
    from PySide6.QtWidgets import QAbstractSpinBox, QCheckBox, QLabel

    font = qapp.font()
    larger = qapp.font()
    larger.setPointSizeF(font.pointSizeF() * scale)
    qapp.setFont(larger)
    try:
        dialog = make_dialog(Settings())
    finally:
        qapp.setFont(font)
    dialog.setFont(larger)
    dialog.show()
    assert dialog.width() >= dialog.minimumSizeHint().width()
    for page in range(dialog.tabs.count()):
        dialog.tabs.setCurrentIndex(page)
        qapp.processEvents()
        shown = dialog.tabs.widget(page)
        widgets = shown.findChildren(QLabel) + shown.findChildren(QCheckBox) + shown.findChildren(QAbstractSpinBox)
        for widget in widgets:
            if not widget.isVisible() or (isinstance(widget, QLabel) and widget.wordWrap()):
                continue
            hint = widget.sizeHint()
            assert widget.width() >= hint.width() and widget.height() >= hint.height(), \
                (dialog.tabs.tabText(page), getattr(widget, "text", lambda: "")())


def test_a_new_dialog_sizes_itself_to_its_contents_not_to_a_fixed_width(make_dialog, qapp):
    normal = make_dialog(Settings())
    font = qapp.font()
    larger = qapp.font()
    larger.setPointSizeF(font.pointSizeF() * 1.6)
    qapp.setFont(larger)
    try:
        large = make_dialog(Settings())  # as on a desktop with larger fonts
    finally:
        qapp.setFont(font)
    assert large.width() >= large.minimumSizeHint().width() > normal.width() * 1.2


def test_counts_read_singular_and_plural(make_dialog):
    dialog = make_dialog(Settings(draft_min=1, draft_max=2, max_tokens=1))
    assert dialog.editors["draft_min"].text() == "1 token"
    assert dialog.editors["draft_max"].text() == "2 tokens"
    assert dialog.editors["max_tokens"].text() == "1 token"
    assert dialog.editors["n_ctx"].text() == "4096 tokens"
    dialog.editors["draft_min"].stepUp()
    assert dialog.editors["draft_min"].text() == "2 tokens"
    dialog.editors["draft_min"].stepDown()
    assert dialog.editors["draft_min"].text() == "1 token"
    assert dialog.settings().draft_min == 1 and dialog.settings().max_tokens == 1  # the unit is not the value
