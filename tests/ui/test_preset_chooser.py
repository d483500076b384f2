from app.ui.preset_chooser import DEFAULT_LABEL, EDIT_LABEL, PresetChooser, PresetDialog


def test_the_chooser_lists_presets_and_emits_the_choice(qtbot):
    chooser = PresetChooser()
    qtbot.addWidget(chooser)
    chooser.set_presets(["Terse", "Pirate"], "Pirate")
    combo = chooser.combo
    assert combo.currentText() == "Pirate" and combo.itemText(0) == DEFAULT_LABEL
    assert combo.itemText(combo.count() - 1) == EDIT_LABEL
    with qtbot.waitSignal(chooser.preset_chosen, timeout=1000) as chosen:
        combo.activated.emit(1)
    assert chosen.args == ["Terse"] and chooser.current == "Terse"
    with qtbot.waitSignal(chooser.edit_requested, timeout=1000), qtbot.assertNotEmitted(chooser.preset_chosen):
        combo.activated.emit(combo.count() - 1)
    assert combo.currentText() == "Terse"  # the editor opens; the choice stays
    chooser.set_presets(["Pirate"], "Terse")  # a preset removed: the chat falls back to the default
    assert chooser.current == "" and combo.currentText() == DEFAULT_LABEL
    chooser.show_current("Pirate")
    assert chooser.current == "Pirate" and combo.currentText() == "Pirate"
    chooser.show_current("Gone")
    assert chooser.current == "" and combo.currentIndex() == 0


def test_the_dialog_adds_renames_rewrites_and_removes(qtbot):
    dialog = PresetDialog([("Terse", "Be brief.")])
    qtbot.addWidget(dialog)
    assert dialog.name_edit.text() == "Terse" and dialog.text_edit.toPlainText() == "Be brief."
    dialog.add_preset()
    dialog.add_preset()
    assert [n for n, _ in dialog.presets()] == ["Terse", "New preset", "New preset 2"]
    dialog.name_edit.clear()
    qtbot.keyClicks(dialog.name_edit, "Pirate")
    dialog.text_edit.setPlainText("Arr.")
    dialog.names.setCurrentRow(1)
    dialog.remove_preset()
    assert dialog.presets() == (("Terse", "Be brief."), ("Pirate", "Arr."))


def test_ok_keeps_the_dialog_open_while_the_presets_cannot_be_kept(qtbot):
    verdicts = ["must not name two presets 'a'", ""]
    dialog = PresetDialog([("a", "x"), ("A", "y")], check=lambda presets: verdicts.pop(0))
    qtbot.addWidget(dialog)
    dialog.open()
    dialog.accept()
    assert dialog.isVisible() and "two presets" in dialog.error_label.text()
    with qtbot.waitSignal(dialog.accepted, timeout=1000):
        dialog.accept()
    assert not dialog.isVisible()
