"""The side panel's figures: which models run, whether they speculate, how fast the reply goes."""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QLabel, QVBoxLayout, QWidget

from app.drafter_kinds import panel_label
from app.engine.types import DrafterKind, Stats
from app.ui.stats_format import (
    STOP_REASONS,
    context_in_view,
    layer_places,
    percent,
    seconds,
    target_round,
    time_saved,
)

DASH = "—"


class LoadedPair(Protocol):
    """What the panel shows of a loaded pair (``app.session.chat_types.LoadInfo``)."""

    target_name: str
    target_path: str
    draft_name: str
    draft_path: str
    drafter: DrafterKind
    speculation_available: bool
    note: str
    compute: str
    workers: tuple[str, ...]
    layers: tuple[tuple[str, int], ...]
    worker_rtt: tuple[float, ...]


def _value_label(parent: QWidget, name: str) -> QLabel:
    label = QLabel(DASH, parent)
    label.setObjectName(name)
    label.setTextFormat(Qt.TextFormat.PlainText)  # file names and reasons are not markup
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setWordWrap(True)
    return label


class StatsPanel(QWidget):
    """Display only: the window calls ``show_models``, ``show_speculation`` and ``show_stats``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._network_seconds = 0.0  # the workers' round trips per target pass (the load's hello)
        self.speed_label = QLabel(DASH, self)
        self.speed_label.setObjectName("liveSpeed")
        font = self.speed_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.8)
        font.setBold(True)
        self.speed_label.setFont(font)
        self.speed_caption = QLabel("tokens per second", self)
        self.speed_caption.setObjectName("caption")

        self.target_label = _value_label(self, "targetModel")
        self.draft_label = _value_label(self, "draftModel")
        self.compute_label = _value_label(self, "compute")
        self.layers_label = _value_label(self, "targetLayers")
        self.layers_label.setToolTip("Where the target's layers are, as llama.cpp placed them over the "
                                     "remote workers and this machine (the draft is always here)")
        self.target_round_label = _value_label(self, "targetRound")
        self.target_round_label.setToolTip("The target's time per round (verifying the guesses), the "
                                           "network's round trips to the workers included")
        self.speculation_label = _value_label(self, "speculation")
        self.acceptance_label = _value_label(self, "acceptance")
        self.per_round_label = _value_label(self, "tokensPerRound")
        self.drafted_label = _value_label(self, "draftedAccepted")
        self.tokens_label = _value_label(self, "tokens")
        self.state_label = _value_label(self, "replyState")
        self.saved_label = _value_label(self, "timeSaved")
        self.saved_label.setToolTip("What speculation saved against the target alone: the reply's tokens "
                                    "at the measured cost of one plain target step, minus the time it took")
        self.chat_saved_label = _value_label(self, "chatTimeSaved")
        self.prompt_label = _value_label(self, "promptTokens")
        self.context_label = _value_label(self, "contextInView")
        self.context_label.setToolTip("How much of the model's context the chat fills after the last reply "
                                      "(prompt plus reply), and the context the model was trained on")

        models = QFormLayout()
        models.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        models.addRow("Target", self.target_label)
        models.addRow("Draft", self.draft_label)
        models.addRow("Runs on", self.compute_label)
        models.addRow("Target layers", self.layers_label)
        models.addRow("Speculation", self.speculation_label)
        self._models = models

        figures = QFormLayout()
        figures.addRow("Acceptance", self.acceptance_label)
        figures.addRow("Tokens/round", self.per_round_label)
        figures.addRow("Target/round", self.target_round_label)
        self._figures = figures
        figures.addRow("Accepted/drafted", self.drafted_label)
        figures.addRow("Tokens", self.tokens_label)
        figures.addRow("State", self.state_label)
        figures.addRow("Time saved", self.saved_label)
        figures.addRow("This chat", self.chat_saved_label)
        figures.addRow("Prompt", self.prompt_label)
        figures.addRow("Context", self.context_label)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addWidget(self.speed_label)
        layout.addWidget(self.speed_caption)
        layout.addLayout(figures)
        layout.addSpacing(8)
        layout.addLayout(models)
        self._show_split(False)

    def show_models(self, info: LoadedPair | None, status: str = "") -> None:
        """``info`` None: nothing loaded; ``status`` says why (loading…, failed)."""
        if info is None:
            self.target_label.setText(status or DASH)
            self.draft_label.setText(DASH)
            self.compute_label.setText(DASH)
            self._show_split(False)
            return
        self._show_split(bool(info.workers))
        self._network_seconds = sum(info.worker_rtt)
        self.layers_label.setText(layer_places(info.layers) if info.layers else DASH)
        self.target_label.setText(info.target_name)
        self.target_label.setToolTip(info.target_path)
        self.draft_label.setText(panel_label(info.drafter, info.draft_name))
        self.draft_label.setToolTip(info.draft_path)
        self.compute_label.setText(f"llama.cpp · {info.compute}")

    def show_speculation(self, wanted: bool, info: LoadedPair | None) -> None:
        if not wanted:
            text = "off (set in Settings)"
        elif info is None:
            text = "on"
        elif info.speculation_available:
            text = "on"
        else:
            text = f"unavailable: {info.note}" if info.note else "unavailable"
        self.speculation_label.setText(text)

    def show_stats(self, stats: Stats, *, live: bool) -> None:
        self.speed_label.setText(f"{stats.tokens_per_second:.1f}")
        self.speed_caption.setText("tokens per second" + (" (live)" if live else " (last reply)"))
        if stats.speculative:
            self.acceptance_label.setText(percent(stats.acceptance))
            self.per_round_label.setText(f"{stats.tokens_per_round:.2f}")
            drafted = f"{stats.accepted} / {stats.drafted}"
            if stats.copied:
                # Guesses copied from earlier text cost no draft-model steps: worth telling apart.
                drafted += f" (copied: {stats.copied_accepted} / {stats.copied})"
            self.drafted_label.setText(drafted)
        else:
            for label in (self.acceptance_label, self.per_round_label, self.drafted_label):
                label.setText("n/a (plain decoding)" if label is self.acceptance_label else DASH)
        self.tokens_label.setText(str(stats.tokens))
        self.target_round_label.setText(target_round(stats, self._network_seconds))
        self.saved_label.setText(DASH if live else (time_saved(stats) or DASH))
        self.state_label.setText("generating…" if live else STOP_REASONS.get(stats.stop_reason, stats.stop_reason or DASH))

    def _show_split(self, split: bool) -> None:
        """The rows of a target split over remote workers, shown only then."""
        self._models.setRowVisible(self.layers_label, split)
        self._figures.setRowVisible(self.target_round_label, split)

    def show_context(self, prompt_tokens: int, used: int, n_ctx: int, n_ctx_train: int = 0) -> None:
        self.prompt_label.setText(f"{prompt_tokens:,} tokens")
        self.context_label.setText(context_in_view(used, n_ctx, n_ctx_train))

    def show_chat_saved(self, saved: float | None, replies: int) -> None:
        """The conversation's total time saved over its ``replies`` with a figure (None: none has one)."""
        if saved is None or not replies:
            self.chat_saved_label.setText(DASH)
            return
        word = "saved" if saved >= 0 else "lost"
        self.chat_saved_label.setText(f"{seconds(abs(saved))} {word} over {replies} repl{'y' if replies == 1 else 'ies'}")

    def clear_stats(self) -> None:
        self.speed_label.setText(DASH)
        self.speed_caption.setText("tokens per second")
        for label in (self.acceptance_label, self.per_round_label, self.target_round_label, self.drafted_label,
                      self.tokens_label, self.state_label, self.saved_label, self.prompt_label,
                      self.context_label):
            label.setText(DASH)
