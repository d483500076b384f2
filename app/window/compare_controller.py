"""Compare: write a reply's turn again without speculation, and say what speculation did.

``install_compare(window)`` adds two buttons to every reply:

- **Compare** re-runs the same turn — the history up to that reply, the system
  prompt, the sampling settings (seed included) and the length limit in use when
  the reply was written — with ``SpecConfig(enabled=False)`` through the window's
  ``EngineClient``, then shows both speeds, the speed-up, the acceptance and
  whether the two texts are identical (and why not, when they are not);
- **Stats** opens ``ReplyStatsView``: acceptance by draft position and tokens/s
  over the reply.

The controller only listens: it records each reply's settings and token arrival
times from the window's ``reply_started`` / ``reply_tokens`` signals, and follows
its own request id on the client (the window ignores ids it did not start).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Sequence

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.detokenize import visible
from app.engine.types import SamplingConfig, SpecConfig, Stats, StopReason, TokenEvent
from app.ui.message_view import ASSISTANT, FAILED, STOPPED, STREAMING, ChatMessage
from app.ui.reply_charts import ReplyStatsView, TokenArrivals
from app.ui.stats_format import percent, rate

COMPARE_LABEL = "Compare"
COMPARE_TIP = "Write this reply again without speculation and compare speed and text"
STATS_LABEL = "Stats"
STATS_TIP = "Acceptance by draft position and tokens/s over this reply"
BUSY_TIP = "Wait until the current reply is finished"

IDENTICAL = "Identical — speculation changed nothing but the speed."


# --- what is compared (no widgets) ----------------------------------------------------------

@dataclass(frozen=True)
class TurnRecord:
    """What a reply was asked with: enough to ask for it again."""

    history: tuple[tuple[str, str], ...]
    system_prompt: str
    sampling: SamplingConfig
    max_tokens: int
    models: object = None  # the client's ModelSpec at the time (None: unknown)
    recorded: bool = True  # False: rebuilt from the settings as they are now


@dataclass(frozen=True)
class Difference:
    """The first token (0-based ``index``) where the runs part; None on a side that had ended."""

    index: int
    spec_text: str | None
    spec_id: int | None
    plain_text: str | None
    plain_id: int | None


def first_difference(spec: Sequence[TokenEvent], plain: Sequence[TokenEvent]) -> Difference | None:
    """Where the two token streams first differ; None when they are the same.

    Token ids decide when both sides have them (a restored reply may carry only
    text, with id -1); otherwise the token texts do.
    """
    by_id = all(e.id >= 0 for e in spec) and all(e.id >= 0 for e in plain)

    def key(event: TokenEvent) -> object:
        return event.id if by_id else event.text

    for index in range(max(len(spec), len(plain))):
        a = spec[index] if index < len(spec) else None
        b = plain[index] if index < len(plain) else None
        if a is None or b is None or key(a) != key(b):
            return Difference(index,
                              a.text if a else None, a.id if a and a.id >= 0 else None,
                              b.text if b else None, b.id if b and b.id >= 0 else None)
    return None


def _token_shown(text: str | None, token_id: int | None = None) -> str:
    """One side of a difference: the token's text made visible, and its id when known."""
    if text is None:
        return "(the reply had ended)"
    shown = visible(text) if text else "(part of a character)"
    return shown + (f" (token {token_id})" if token_id is not None else "")


@dataclass(frozen=True)
class Comparison:
    """One finished comparison: the reply as written (speculative) against the plain re-run."""

    sampling: SamplingConfig
    spec_stats: Stats
    plain_stats: Stats
    spec_text: str
    plain_text: str
    difference: Difference | None
    note: str = ""  # caveats about how comparable the runs are

    @property
    def identical(self) -> bool:
        return self.difference is None

    @property
    def speedup(self) -> float:
        """Speculative tokens/s over plain tokens/s (0 when the plain run produced nothing)."""
        plain = self.plain_stats.tokens_per_second
        return self.spec_stats.tokens_per_second / plain if plain > 0 else 0.0

    @property
    def verdict(self) -> str:
        if self.identical:
            if self.sampling.greedy:
                return IDENTICAL
            return "Identical this time — speculation changed nothing but the speed."
        where = f"token {self.difference.index + 1}"
        if self.sampling.greedy:
            return f"Not identical: the texts part at {where}, by a floating-point near-tie."
        return f"Different texts (from {where} on) — expected at temperature {self.sampling.temperature:g}."

    @property
    def explanation(self) -> str:
        if self.sampling.greedy:
            if self.identical:
                return ("At temperature 0 both runs take the target model's most likely token each "
                        "time, so speculation must not change a single token, and it did not.")
            return ("At temperature 0 both runs take the target's most likely token, so this is not a "
                    "speculation error but rounding: verifying a draft scores several tokens in one "
                    "batch, plain decoding scores one at a time, and with F32/F16 weights (on CPU or "
                    "GPU) the two results can differ in the last digits — enough to flip the choice "
                    "between two almost equally likely tokens. After that token the two runs continue "
                    "from different texts.")
        seeded = ("" if self.sampling.seed is None else
                  " The same seed does not make the runs match: speculation also draws random numbers "
                  "to accept or reject draft tokens, so the two runs use the seed's numbers differently.")
        return (f"At temperature {self.sampling.temperature:g} each run samples its tokens independently, so "
                "the texts are expected to differ, just as two plain runs would. Speculative decoding is "
                "lossless in distribution: every token is drawn from exactly the distribution the target "
                "model alone samples from. Lossless means the same distribution, not the same text." + seeded)

    @property
    def difference_detail(self) -> str:
        d = self.difference
        if d is None:
            return ""
        return (f"First difference at token {d.index + 1}: speculative {_token_shown(d.spec_text, d.spec_id)}, "
                f"plain {_token_shown(d.plain_text, d.plain_id)}.")


# --- the dialog -----------------------------------------------------------------------------

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

    def show_comparison(self, comparison: Comparison) -> None:
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


# --- the controller -------------------------------------------------------------------------

@dataclass
class _Run:
    """The comparison in progress: the reply as it was, and the plain tokens so far."""

    request_id: int
    record: TurnRecord
    spec_events: list[TokenEvent]
    spec_stats: Stats
    note: str
    plain_events: list[TokenEvent]


class CompareController(QObject):
    """Adds Compare and Stats to every reply of ``window`` and runs the comparisons.

    Signals: ``comparison_finished(Comparison)``, ``comparison_cancelled(int)`` (plain
    tokens written), ``comparison_failed(str)``.
    """

    comparison_finished = Signal(object)
    comparison_cancelled = Signal(int)
    comparison_failed = Signal(str)

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self.client = window.client
        self.chat_view = window.chat_view
        # Per reply, dropped with it: what it was asked with, and when its tokens came.
        self._records: weakref.WeakKeyDictionary[ChatMessage, TurnRecord] = weakref.WeakKeyDictionary()
        self._arrivals: weakref.WeakKeyDictionary[ChatMessage, TokenArrivals] = weakref.WeakKeyDictionary()
        self._run: _Run | None = None
        self.dialog: CompareDialog | None = None
        self.stats_view: ReplyStatsView | None = None
        self._stats_reply: weakref.ref | None = None  # the reply the stats view shows
        self.compare_last_action: QAction | None = None  # in the View menu, when there is one
        self.stats_action: QAction | None = None

        window.reply_started.connect(self._on_reply_started)
        window.reply_tokens.connect(self._on_reply_tokens)
        window.reply_finished.connect(self._on_reply_finished)
        self.client.tokens.connect(self._on_tokens)
        self.client.finished.connect(self._on_finished)
        self.client.failed.connect(self._on_failed)
        self.client.busy_changed.connect(self._update_buttons)

        self.chat_view.add_reply_action(COMPARE_LABEL, COMPARE_TIP, self.compare)
        self.chat_view.add_reply_action(STATS_LABEL, STATS_TIP, self.show_stats)
        self._add_menu_actions()
        self._update_buttons(self.client.busy)

    @property
    def running(self) -> bool:
        return self._run is not None

    @property
    def request_id(self) -> int | None:
        return self._run.request_id if self._run else None

    # --- recording replies ------------------------------------------------------------------

    def _on_reply_started(self, reply: ChatMessage) -> None:
        self._records[reply] = self._record_now(reply, recorded=True)
        self._arrivals[reply] = TokenArrivals()
        self._update_buttons(self.client.busy)

    def _on_reply_tokens(self, reply: ChatMessage, events: list) -> None:
        arrivals = self._arrivals.get(reply)
        if arrivals is not None:
            arrivals.add(time.perf_counter(), len(events))

    def _on_reply_finished(self, reply: ChatMessage) -> None:
        if self._stats_reply is not None and self._stats_reply() is reply and self.stats_view is not None:
            self._show_stats_of(reply)

    def _record_now(self, reply: ChatMessage, *, recorded: bool) -> TurnRecord:
        """The turn as the window would send it now (``recorded``: at the reply's start)."""
        window, settings = self.window, getattr(self.window, "settings", None)
        sampling = window.sampling_config() if hasattr(window, "sampling_config") else SamplingConfig()
        return TurnRecord(history=tuple(self.chat_view.history(upto=reply)),
                          system_prompt=getattr(settings, "system_prompt", ""),
                          sampling=sampling,
                          max_tokens=getattr(settings, "max_tokens", 256),
                          models=getattr(self.client, "spec", None),
                          recorded=recorded)

    # --- Compare ----------------------------------------------------------------------------

    def compare(self, reply: ChatMessage | None = None) -> int | None:
        """Start comparing ``reply`` (default: the last one); returns the plain run's request id."""
        reply = reply or self.chat_view.last_reply()
        dialog = self._show_dialog()
        if self._run is not None:
            return None  # the dialog shows the comparison already running
        if reply is None:
            dialog.show_message("Nothing to compare", "There is no reply yet.")
            return None
        if self.client.busy:
            dialog.show_message("Compare", "A reply is being written; compare it once it is finished.")
            return None
        stats = reply.stats
        if reply.status in (STREAMING, FAILED) or stats is None or not reply.events:
            dialog.show_message("Compare", "This reply has no finished text to compare.")
            return None
        if not stats.speculative:
            why = f" ({stats.note})" if stats.note else ""
            dialog.show_message("Compare", f"This reply was written without speculation{why}, "
                                           "so there is no speculative run to compare with plain decoding.")
            return None

        record = self._records.get(reply) or self._record_now(reply, recorded=False)
        notes = []
        max_tokens = record.max_tokens
        if reply.status == STOPPED:
            max_tokens = len(reply.events)
            notes.append(f"The reply was stopped after {max_tokens} tokens; the plain run writes as many.")
        if not record.recorded:
            notes.append("This reply's own settings were not recorded (it was restored or written "
                         "before Compare was installed): the plain run uses the current sampling settings.")
        if record.models is not None and record.models != getattr(self.client, "spec", None):
            notes.append("The models changed since this reply was written; the plain run uses the ones "
                         "loaded now.")

        request_id = self.client.generate(list(record.history), system_prompt=record.system_prompt,
                                          sampling=record.sampling, spec=SpecConfig(enabled=False),
                                          max_tokens=max_tokens)
        self._run = _Run(request_id, record, list(reply.events), stats, " ".join(notes), [])
        expected = len(reply.events) if record.sampling.greedy else max_tokens
        dialog.start(f"Reply {self._reply_number(reply)}: the same turn again, without speculation",
                     expected, self._run.note)
        return request_id

    def cancel(self) -> None:
        if self._run is not None:
            self.client.stop(self._run.request_id)

    def _show_dialog(self) -> CompareDialog:
        if self.dialog is None:
            self.dialog = CompareDialog(self.window)
            self.dialog.cancel_requested.connect(self.cancel)
        self.dialog.show()
        self.dialog.raise_()
        return self.dialog

    def _on_tokens(self, request_id: int, events: list, stats: Stats | None) -> None:
        run = self._run
        if run is None or request_id != run.request_id:
            return
        run.plain_events.extend(events)
        if self.dialog is not None:
            self.dialog.show_progress(len(run.plain_events), stats)

    def _on_finished(self, request_id: int, plain_stats: Stats) -> None:
        run = self._run
        if run is None or request_id != run.request_id:
            return
        self._run = None
        if plain_stats.stop_reason == StopReason.CANCELLED:
            if self.dialog is not None:
                self.dialog.show_cancelled(len(run.plain_events))
            self.comparison_cancelled.emit(len(run.plain_events))
            return
        comparison = Comparison(
            sampling=run.record.sampling, spec_stats=run.spec_stats, plain_stats=plain_stats,
            spec_text="".join(e.text for e in run.spec_events),
            plain_text="".join(e.text for e in run.plain_events),
            difference=first_difference(run.spec_events, run.plain_events), note=run.note)
        if self.dialog is not None:
            self.dialog.show_comparison(comparison)
        self.comparison_finished.emit(comparison)

    def _on_failed(self, request_id: int, message: str) -> None:
        run = self._run
        if run is None or request_id != run.request_id:
            return
        self._run = None
        if self.dialog is not None:
            self.dialog.show_message("Compare failed", message)
        self.comparison_failed.emit(message)

    def _update_buttons(self, busy: bool) -> None:
        """Compare waits for the engine to be free (one generation at a time)."""
        for message in self.chat_view.messages():
            button = message.action_buttons.get(COMPARE_LABEL) if message.role == ASSISTANT else None
            if button is not None:
                button.setEnabled(not busy)
                button.setToolTip(BUSY_TIP if busy else COMPARE_TIP)
        if self.compare_last_action is not None:
            self.compare_last_action.setEnabled(not busy)

    # --- Stats ------------------------------------------------------------------------------

    def show_stats(self, reply: ChatMessage | None = None) -> ReplyStatsView | None:
        """Open the stats view on ``reply`` (default: the last reply); None when there is none."""
        reply = reply or self.chat_view.last_reply()
        if reply is None:
            self.window.statusBar().showMessage("There is no reply yet.", 3000)
            return None
        if self.stats_view is None:
            self.stats_view = ReplyStatsView(self.window)
        self._stats_reply = weakref.ref(reply)
        self._show_stats_of(reply)
        self.stats_view.show()
        self.stats_view.raise_()
        return self.stats_view

    def _show_stats_of(self, reply: ChatMessage) -> None:
        self.stats_view.show_reply(reply.stats, self._arrivals.get(reply), f"reply {self._reply_number(reply)}")

    # --- helpers ----------------------------------------------------------------------------

    def _reply_number(self, reply: ChatMessage) -> int:
        replies = [m for m in self.chat_view.messages() if m.role == ASSISTANT]
        return replies.index(reply) + 1 if reply in replies else len(replies)

    def _add_menu_actions(self) -> None:
        """"Compare last reply" and "Stats of last reply" in the View menu, when there is one."""
        menu = _menu(self.window, "View")
        if menu is None:
            return
        menu.addSeparator()
        self.compare_last_action = QAction("&Compare last reply with plain decoding", self.window)
        self.compare_last_action.triggered.connect(lambda: self.compare())
        self.stats_action = QAction("Last reply's &stats", self.window)
        self.stats_action.triggered.connect(lambda: self.show_stats())
        menu.addAction(self.compare_last_action)
        menu.addAction(self.stats_action)


def _menu(window, title: str) -> QMenu | None:
    """The window's menu called ``title`` (ignoring the & mnemonic), if it has one."""
    if not hasattr(window, "menuBar"):
        return None
    for action in window.menuBar().actions():
        menu = action.menu()
        if menu is not None and action.text().replace("&", "") == title:
            return menu
    return None


def install_compare(window) -> CompareController:
    """Give ``window`` (a MainWindow) per-reply Compare and Stats; keeps itself alive as a child.

    Idempotent: a second call returns the controller already installed.
    """
    existing = window.findChild(CompareController)
    return existing if existing is not None else CompareController(window)
