"""The Compare dialog: the plain run's progress (with Cancel), then the comparison's figures and words.

Display and emit only: the Compare controller (app/window/compare_controller.py) runs
the comparison and hands over what to show; Cancel is ``cancel_requested``.
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.types import Stats
from app.ui.stats_format import percent, rate


class ComparisonShown(Protocol):
    """What the dialog shows of a comparison (``app.session.compare.Comparison``)."""

    spec_stats: Stats
    plain_stats: Stats
    note: str

    @property
    def speedup(self) -> float: ...
    @property
    def verdict(self) -> str: ...
    @property
    def explanation(self) -> str: ...
    @property
    def difference_detail(self) -> str: ...


def _label(parent: QWidget, name: str, text: str = "") -> QLabel:
    label = QLabel(text, parent)
    label.setObjectName(name)
    label.setTextFormat(Qt.TextFormat.PlainText)  # token texts are not markup
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setWordWrap(True)
    return label


class CompareDialog(QDialog):
    """Non-modal. Shows the plain run's progress (with Cancel), then the comparison."""

    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compareDialog")
        self.setWindowTitle("Compare with plain decoding")
        self.setModal(False)
        self.resize(520, 360)
        self.running = False

        self.heading_label = _label(self, "compareHeading")
        self.progress = QProgressBar(self)
        self.progress.setObjectName("compareProgress")
        self.progress.setFormat("%v / %m tokens")
        self.progress_label = _label(self, "compareProgressText")
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setObjectName("compareCancel")
        self.cancel_button.clicked.connect(self._cancel)

        self.spec_speed_label = _label(self, "specSpeed")
        self.plain_speed_label = _label(self, "plainSpeed")
        self.speedup_label = _label(self, "speedup")
        font = self.speedup_label.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.3)
        self.speedup_label.setFont(font)
        self.acceptance_label = _label(self, "compareAcceptance")
        self.figures = QWidget(self)
        form = QFormLayout(self.figures)
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("Speculative", self.spec_speed_label)
        form.addRow("Plain", self.plain_speed_label)
        form.addRow("Speed-up", self.speedup_label)
        form.addRow("Acceptance", self.acceptance_label)

        self.verdict_label = _label(self, "compareVerdict")
        bold = self.verdict_label.font()
        bold.setBold(True)
        self.verdict_label.setFont(bold)
        self.explanation_label = _label(self, "compareExplanation")
        self.difference_label = _label(self, "compareDifference")
        self.note_label = _label(self, "compareNote")

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.close)

        layout = QVBoxLayout(self)
        layout.addWidget(self.heading_label)
        layout.addWidget(self.progress)
        layout.addWidget(self.progress_label)
        layout.addWidget(self.cancel_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.figures)
        layout.addWidget(self.verdict_label)
        layout.addWidget(self.explanation_label)
        layout.addWidget(self.difference_label)
        layout.addWidget(self.note_label)
        layout.addStretch(1)
        layout.addWidget(buttons)
        self._set_stage(running=False, figures=False)

    # --- states -----------------------------------------------------------------------------

    def start(self, heading: str, expected_tokens: int, note: str = "") -> None:
        self.heading_label.setText(heading)
        self.progress.setRange(0, max(1, expected_tokens))
        self.progress.setValue(0)
        self.progress_label.setText("Writing the same turn without speculation…")
        self.note_label.setText(note)
        for label in (self.verdict_label, self.explanation_label, self.difference_label):
            label.clear()
        self._set_stage(running=True, figures=False)

    def show_progress(self, tokens: int, stats: Stats | None) -> None:
        if tokens > self.progress.maximum():
            self.progress.setMaximum(tokens)
        self.progress.setValue(tokens)
        speed = f" · {rate(stats.tokens_per_second)}" if stats is not None and stats.tokens_per_second else ""
        self.progress_label.setText(f"Plain decoding: {tokens} tokens{speed}")

    def show_comparison(self, comparison: ComparisonShown) -> None:
        spec, plain = comparison.spec_stats, comparison.plain_stats
        self.spec_speed_label.setText(f"{rate(spec.tokens_per_second)} ({spec.tokens} tokens, this reply)")
        self.plain_speed_label.setText(f"{rate(plain.tokens_per_second)} ({plain.tokens} tokens, just now)")
        self.speedup_label.setText(f"{comparison.speedup:.2f}× " + (
            "faster with speculation" if comparison.speedup >= 1 else "(speculation was slower here)"))
        self.acceptance_label.setText(f"{percent(spec.acceptance)} of drafted tokens "
                                      f"({spec.accepted}/{spec.drafted}), {spec.tokens_per_round:.2f} tokens/round")
        self.verdict_label.setText(comparison.verdict)
        self.explanation_label.setText(comparison.explanation)
        self.difference_label.setText(comparison.difference_detail)
        self.note_label.setText(comparison.note)
        self._set_stage(running=False, figures=True)

    def show_cancelled(self, tokens: int) -> None:
        self.progress_label.setText(f"Cancelled after {tokens} tokens of plain decoding; nothing to compare.")
        self.verdict_label.setText("Comparison cancelled.")
        self._set_stage(running=False, figures=False, keep_progress=True)

    def show_message(self, heading: str, message: str) -> None:
        """Nothing runs: say why (a failed run, a reply that cannot be compared)."""
        self.heading_label.setText(heading)
        self.verdict_label.setText(message)
        for label in (self.explanation_label, self.difference_label, self.note_label):
            label.clear()
        self._set_stage(running=False, figures=False)

    def _set_stage(self, *, running: bool, figures: bool, keep_progress: bool = False) -> None:
        self.running = running
        self.progress.setVisible(running or keep_progress)
        self.progress_label.setVisible(running or keep_progress)
        self.cancel_button.setVisible(running)
        self.cancel_button.setEnabled(running)
        self.cancel_button.setText("Cancel")
        self.figures.setVisible(figures)
        self.difference_label.setVisible(figures and bool(self.difference_label.text()))
        self.explanation_label.setVisible(figures)

    def _cancel(self) -> None:
        if self.running:
            self.cancel_button.setEnabled(False)
            self.cancel_button.setText("Cancelling…")
            self.cancel_requested.emit()

    def closeEvent(self, event) -> None:  # noqa: N802 — closing while it runs cancels the run
        self._cancel()
        super().closeEvent(event)

    def reject(self) -> None:  # Esc
        self.close()
