"""The settings dialog: one editor per ``Settings`` field, tooltips from its declaration.

Display and emit only: the dialog returns a new ``Settings`` (validated by the
dataclass itself) and asks, by signal, whether a draft fits a target and what a remote
worker is; the window answers through ``show_compatibility`` and ``show_worker_test``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.drafter_kinds import Needs, dialog_hint, needs
from app.drafter_kinds import choosable as choosable_kinds
from app.errors import TandemError
from app.ui.chat_format_chooser import ChatFormatChooser
from app.ui.worker_list import WorkerList
from app.storage.settings import Settings, number_range, options

LABELS = {
    "target_path": "Target model", "draft_path": "Draft model", "drafter": "Guesses from",
    "chat_formats": "Chat format",
    "speculation": "Speculative decoding", "draft_max": "Draft length (max)", "draft_min": "Draft length (min)",
    "p_min": "Stop drafting below probability", "copy_repeats": "Repeated text", "tree": "Token trees",
    "target_gpu_layers": "Target GPU layers",
    "draft_gpu_layers": "Draft GPU layers", "n_ctx": "Context size", "n_threads": "CPU threads",
    "flash_attention": "Flash attention", "rpc_workers": "Remote workers (RPC)", "tensor_split": "Layer split",
    "temperature": "Temperature", "top_k": "Top-k", "top_p": "Top-p", "min_p": "Min-p", "seed": "Seed",
    "max_tokens": "Longest reply", "system_prompt": "System prompt",
}
PAGES = {
    "Models": ("target_path", "chat_formats", "drafter", "draft_path"),
    "Speculation": ("speculation", "draft_max", "draft_min", "p_min", "copy_repeats", "tree"),
    "Sampling": ("temperature", "top_k", "top_p", "min_p", "seed", "max_tokens"),
    "Hardware": ("target_gpu_layers", "draft_gpu_layers", "n_ctx", "n_threads", "flash_attention",
                 "rpc_workers", "tensor_split"),
    "System prompt": ("system_prompt",),
}
TREES = (("Automatic (where measured to pay)", "auto"), ("On (wherever the draft is unsure)", "on"), ("Off", "off"))
FLASH_ATTENTION = (("Automatic (off on a CPU)", "auto"), ("On", "on"), ("Off", "off"))
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
MIN_WIDTH = 560  # px: room for a path and its Browse button
_CHECK_DELAY_MS = 300  # typing a path should not fire a check per keystroke
_SPIN_MOST = 2**31 - 1  # a spin box holds 32-bit numbers (the seed has an editor of its own)


def drafters() -> tuple[tuple[str, str], ...]:
    """The drafter list: each kind a user may choose (app/drafter_kinds.py), as (label, word)."""
    return tuple((spec.label, str(spec.kind)) for spec in choosable_kinds())


def _line(placeholder: str) -> QLineEdit:
    line = QLineEdit()
    line.setPlaceholderText(placeholder)
    line.setClearButtonEnabled(True)
    return line


def _combo(choices: tuple[tuple[str, str], ...]) -> QComboBox:
    box = QComboBox()
    for label, value in choices:
        box.addItem(label, value)
    return box


class CountSpinBox(QSpinBox):
    """A count with its unit, singular or plural as the value says ("1 token", "2 tokens")."""

    def __init__(self, unit: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._unit = unit
        self.valueChanged.connect(self._name_unit)
        self._name_unit(self.value())

    def _name_unit(self, value: int) -> None:
        suffix = f" {self._unit}" if value in (1, -1) else f" {self._unit}s"
        if suffix != self.suffix():
            self.setSuffix(suffix)


class LayerSpinBox(QSpinBox):
    """GPU layers: "auto" (planned before loading) at the minimum, "all" one above it."""

    AUTO, ALL = -2, -1

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setRange(self.AUTO, min(number_range("target_gpu_layers").high, 2**31 - 1))
        self.setSpecialValueText("auto")

    def textFromValue(self, value: int) -> str:  # noqa: N802 - Qt's name
        return "all" if value == self.ALL else super().textFromValue(value)



def _spin(low: int, high: int, special: str = "", step: int = 1, unit: str = "") -> QSpinBox:
    box = CountSpinBox(unit) if unit else QSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    if special:
        box.setSpecialValueText(special)  # shown at the minimum
    return box


def _spin_for(name: str, special: str = "", step: int = 1, unit: str = "") -> QSpinBox:
    """A spin box over the declared range of ``name``; with ``special`` ('auto') one below
    it stands for that word (a setting that may be 'auto')."""
    bounds = number_range(name)
    low = int(bounds.low) - (1 if special == "auto" else 0)
    return _spin(low, min(int(bounds.high), _SPIN_MOST), special=special, step=step, unit=unit)


def _double_for(name: str, step: float, decimals: int = 2) -> QDoubleSpinBox:
    bounds = number_range(name)
    low = bounds.low if bounds.low_inclusive else bounds.low + 10 ** -decimals
    return _double(low, bounds.high, step, decimals)


class SeedEdit(QLineEdit):
    """The seed: any whole number of the setting's range (past a spin box's 32 bits);
    empty or -1 is "random"."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("random")

    def set_seed(self, value: int) -> None:
        self.setText("random" if value == -1 else str(value))

    def seed(self) -> int | str:
        text = self.text().strip()
        if text in ("", "random"):
            return -1
        try:
            return int(text)
        except ValueError:
            return text  # the setting's check says what is wrong with it


def _double(low: float, high: float, step: float, decimals: int = 2) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    return box


class PathEdit(QWidget):
    """A path field with a Browse button."""

    def __init__(self, title: str, placeholder: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.line = QLineEdit(self)
        self.line.setPlaceholderText(placeholder)
        self.line.setClearButtonEnabled(True)
        self.browse = QPushButton("Browse…", self)
        self.browse.clicked.connect(self._browse)
        self._title = title
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.line, 1)
        layout.addWidget(self.browse)

    def text(self) -> str:
        return self.line.text().strip()

    def setText(self, text: str) -> None:  # noqa: N802 — reads like the Qt widgets around it
        self.line.setText(text)

    def _browse(self) -> None:
        start = str(Path(self.text()).parent) if self.text() else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, self._title, start, GGUF_FILTER)
        if path:
            self.line.setText(path)


class SettingsDialog(QDialog):
    compatibility_check_requested = Signal(str, str)  # target path, draft path
    worker_test_requested = Signal(str)  # a remote worker's host:port (Hardware → Test)
    # Will the models fit: (target, draft, n_ctx, target layers, draft layers, flash attention),
    # answered by show_plan with the same tuple (app.session.fit.plan_line)
    plan_requested = Signal(object)

    def __init__(self, settings: Settings, parent: QWidget | None = None, *,
                 chat_formats: Sequence[str] = ()) -> None:
        """``chat_formats``: the built-in format names offered for the target (llama.cpp's)."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._base = settings
        self.editors: dict[str, QWidget] = self._make_editors()
        self.editors["chat_formats"].set_names(chat_formats)
        self.editors["rpc_workers"].test_requested.connect(self.worker_test_requested)
        descriptions = {o.name: o.description for o in options()}

        self.tabs = QTabWidget(self)
        for page, names in PAGES.items():
            form_page = QWidget()
            form = QFormLayout(form_page)
            form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            for name in names:
                editor = self.editors[name]
                editor.setObjectName(name)
                editor.setToolTip(descriptions[name])
                if isinstance(editor, QCheckBox):
                    form.addRow("", editor)
                else:
                    form.addRow(LABELS[name], editor)
            if page == "Models":
                form.addRow("", self._compat_row())
            if page == "Hardware":
                form.addRow("", self._plan_row())
            self.tabs.addTab(form_page, page)

        self.error_label = QLabel(self)
        self.error_label.setObjectName("settingsError")
        self.error_label.setTextFormat(Qt.TextFormat.PlainText)
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #cf222e;")
        self.error_label.hide()
        self.note_label = QLabel("Speculation, draft length and sampling apply to the next message; "
                                 "a model, context, thread or GPU-layer change reloads the models.", self)
        self.note_label.setWordWrap(True)
        self.note_label.setObjectName("caption")

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
                                   | QDialogButtonBox.StandardButton.RestoreDefaults, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).clicked.connect(self.restore_defaults)
        self.buttons = buttons

        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.note_label)
        layout.addWidget(self.error_label)
        layout.addWidget(buttons)

        self._check_timer = QTimer(self)
        self._check_timer.setSingleShot(True)
        self._check_timer.setInterval(_CHECK_DELAY_MS)
        self._check_timer.timeout.connect(self._request_check)
        self._plan_timer = QTimer(self)
        self._plan_timer.setSingleShot(True)
        self._plan_timer.setInterval(_CHECK_DELAY_MS)
        self._plan_timer.timeout.connect(self._request_plan)
        self.load(settings)
        self.editors["target_path"].line.textChanged.connect(self._paths_changed)
        self.editors["target_path"].line.textChanged.connect(
            lambda: self.editors["chat_formats"].set_model(self.editors["target_path"].text()))
        self.editors["draft_path"].line.textChanged.connect(self._paths_changed)
        self.editors["drafter"].currentIndexChanged.connect(self._paths_changed)
        self.editors["speculation"].toggled.connect(self._update_enabled)
        for name in ("target_gpu_layers", "draft_gpu_layers", "n_ctx"):
            self.editors[name].valueChanged.connect(self._plan_timer.start)
        self.editors["flash_attention"].currentIndexChanged.connect(self._plan_timer.start)
        self._paths_changed()
        # As big as its contents ask, every page's labels whole: no fixed minimum (which
        # would stop the layout enforcing its own), and resized explicitly, since a window
        # left to size itself is kept to 2/3 of the screen, cutting labels on a small one.
        self.resize(self.sizeHint().expandedTo(QSize(MIN_WIDTH, 0)))

    # --- values -------------------------------------------------------------------------------

    def load(self, settings: Settings) -> None:
        for name, editor in self.editors.items():
            _set_value(editor, getattr(settings, name))
        self.editors["chat_formats"].set_model(self.editors["target_path"].text())
        self._update_enabled()

    def values(self) -> dict[str, Any]:
        return {name: _get_value(editor) for name, editor in self.editors.items()}

    def settings(self) -> Settings:
        """The edited settings; raises InvalidSettingError with a one-line reason."""
        return self._base.replace(**self.values())

    def restore_defaults(self) -> None:
        chooser = self.editors["chat_formats"]  # other files keep the formats chosen for them
        self.load(Settings(chat_formats=tuple(p for p in chooser.choices() if p[0] != chooser.model())))

    def accept(self) -> None:
        try:
            self.settings()
        except TandemError as exc:
            self.error_label.setText(str(exc))
            self.error_label.show()
            return
        super().accept()

    def show_worker_test(self, endpoint: str, ok: bool, line: str) -> None:
        self.editors["rpc_workers"].show_test(endpoint, ok, line)

    # --- the compatibility line ---------------------------------------------------------------

    def show_compatibility(self, target: str, draft: str, ok: bool, rule: str | None, reason: str) -> None:
        if (target, draft) != self._pair_to_check():
            return  # an answer to an older question
        self.compat_label.setText(("✓ " if ok else "✗ ") + reason + (f" (rule: {rule})" if rule and not ok else ""))
        self.compat_label.setProperty("ok", ok)
        self.compat_label.setStyleSheet("" if ok else "color: #cf222e;")

    def _compat_row(self) -> QLabel:
        self.compat_label = QLabel(self)
        self.compat_label.setObjectName("compatibility")
        self.compat_label.setTextFormat(Qt.TextFormat.PlainText)  # token texts from the files
        self.compat_label.setWordWrap(True)
        return self.compat_label

    # --- the memory plan -----------------------------------------------------------------------

    def _plan_row(self) -> QLabel:
        self.plan_label = QLabel("Memory: planning…", self)
        self.plan_label.setObjectName("memoryPlan")
        self.plan_label.setTextFormat(Qt.TextFormat.PlainText)  # file names and reasons
        self.plan_label.setWordWrap(True)
        return self.plan_label

    def plan_question(self) -> tuple:
        """What the plan line answers: the models and the hardware settings as edited."""
        uses_model = needs(_get_value(self.editors["drafter"])) is Needs.DRAFT_FILE
        return (self.editors["target_path"].text(), self.editors["draft_path"].text() if uses_model else "",
                self.editors["n_ctx"].value(), _get_value(self.editors["target_gpu_layers"]),
                _get_value(self.editors["draft_gpu_layers"]), _get_value(self.editors["flash_attention"]))

    def show_plan(self, question: tuple, line: str) -> None:
        if question == self.plan_question():  # else an answer to an older question
            self.plan_label.setText(line)

    def _request_plan(self) -> None:
        self.plan_requested.emit(self.plan_question())

    def _pair_to_check(self) -> tuple[str, str] | None:
        target, draft = self.editors["target_path"].text(), self.editors["draft_path"].text()
        if needs(_get_value(self.editors["drafter"])) is not Needs.DRAFT_FILE or not target or not draft:
            return None
        return target, draft

    def _paths_changed(self) -> None:
        self._update_enabled()
        self._plan_timer.start()
        pair = self._pair_to_check()
        if pair is None:
            drafter = _get_value(self.editors["drafter"])
            self.compat_label.setText(
                dialog_hint(drafter) if needs(drafter) is not Needs.DRAFT_FILE
                else "Empty fields use the demo pair." if not self.editors["target_path"].text()
                else "No draft model: a target that ships an MTP head drafts with it; any other decodes "
                     "without speculation.")
            self.compat_label.setStyleSheet("")
            self._check_timer.stop()
            return
        self.compat_label.setText("Checking whether the draft fits the target…")
        self.compat_label.setStyleSheet("")
        self._check_timer.start()

    def _request_check(self) -> None:
        pair = self._pair_to_check()
        if pair is not None:
            self.compatibility_check_requested.emit(*pair)

    def _update_enabled(self) -> None:
        uses_model = needs(_get_value(self.editors["drafter"])) is Needs.DRAFT_FILE
        self.editors["draft_path"].setEnabled(uses_model)
        self.editors["draft_gpu_layers"].setEnabled(uses_model)
        speculating = self.editors["speculation"].isChecked()
        for name in ("draft_max", "draft_min", "p_min"):
            self.editors[name].setEnabled(speculating)
        # Prompt lookup copies anyway: the option only spares a draft model its steps.
        self.editors["copy_repeats"].setEnabled(speculating and uses_model)

    def _make_editors(self) -> dict[str, QWidget]:
        drafter = _combo(drafters())
        system_prompt = QPlainTextEdit()
        system_prompt.setPlaceholderText("e.g. You are a concise assistant.")
        return {
            "target_path": PathEdit("Choose the target model", "Demo pair target (SmolLM2-135M, F32)"),
            "chat_formats": ChatFormatChooser(),
            "drafter": drafter,
            "draft_path": PathEdit("Choose the draft model", "Demo pair draft (with the demo target)"),
            "speculation": QCheckBox("Speculate: draft tokens, then verify them in one batch"),
            # The value below the range's first is "auto".
            # Each number's range is its declaration's (Settings, app.storage.settings.number_range)
            "draft_max": _spin_for("draft_max", special="auto", unit="token"),
            "draft_min": _spin_for("draft_min", unit="token"),
            "p_min": _double_for("p_min", 0.05),
            "copy_repeats": QCheckBox("Copy text that repeats earlier text instead of drafting it"),
            "tree": _combo(TREES),
            "temperature": _double_for("temperature", 0.1),
            "top_k": _spin_for("top_k", special="off"),
            "top_p": _double_for("top_p", 0.05),
            "min_p": _double_for("min_p", 0.01),
            "seed": SeedEdit(),
            "max_tokens": _spin_for("max_tokens", unit="token"),
            "target_gpu_layers": LayerSpinBox(),
            "draft_gpu_layers": LayerSpinBox(),
            "n_ctx": _spin_for("n_ctx", step=256, unit="token"),
            "n_threads": _spin_for("n_threads", special="automatic"),
            "flash_attention": _combo(FLASH_ATTENTION),
            "rpc_workers": WorkerList(),
            "tensor_split": _line("by free memory (e.g. 3,1)"),
            "system_prompt": system_prompt,
        }


def _set_value(editor: QWidget, value: Any) -> None:
    if isinstance(editor, SeedEdit):
        editor.set_seed(value)
    elif isinstance(editor, (PathEdit, WorkerList)):
        editor.setText(value)
    elif isinstance(editor, ChatFormatChooser):
        editor.set_choices(value)
    elif isinstance(editor, QComboBox):
        editor.setCurrentIndex(max(0, editor.findData(value)))
    elif isinstance(editor, QCheckBox):
        editor.setChecked(bool(value))
    elif isinstance(editor, QSpinBox):
        editor.setValue(editor.minimum() if value == "auto" else int(value))
    elif isinstance(editor, QDoubleSpinBox):
        editor.setValue(float(value))
    elif isinstance(editor, QPlainTextEdit):
        editor.setPlainText(value)
    elif isinstance(editor, QLineEdit):
        editor.setText(value)


def _get_value(editor: QWidget) -> Any:
    if isinstance(editor, SeedEdit):
        return editor.seed()
    if isinstance(editor, (PathEdit, WorkerList)):
        return editor.text()
    if isinstance(editor, ChatFormatChooser):
        return editor.choices()
    if isinstance(editor, QComboBox):
        return editor.currentData()
    if isinstance(editor, QCheckBox):
        return editor.isChecked()
    if isinstance(editor, QSpinBox):
        if editor.specialValueText() == "auto" and editor.value() == editor.minimum():
            return "auto"
        return editor.value()
    if isinstance(editor, QDoubleSpinBox):
        return round(editor.value(), editor.decimals())
    if isinstance(editor, QPlainTextEdit):
        return editor.toPlainText()
    if isinstance(editor, QLineEdit):
        return editor.text().strip()
    raise TypeError(f"no value for {type(editor).__name__}")
