"""Compare: write a reply's turn again without speculation, and say what speculation did.

The controller adds two buttons to every reply of the chat view, and two actions
(``actions``: "Compare last reply", "Last reply's stats") for the window to place:

- **Compare** re-runs the same turn — the history up to that reply, the system
  prompt, the sampling settings (seed included) and the length limit in use when
  the reply was written — with ``SpecConfig(enabled=False)`` through the
  engine client (``app.bridge.client.Engine``), then shows both speeds, the speed-up, the acceptance and whether
  the two texts are identical (and why not): the figures and words are
  ``app.session.compare``'s, the dialog ``app.ui.compare_dialog``'s;
- **Stats** opens ``ReplyStatsView``: acceptance by draft position and tokens/s
  over the reply.

It only listens: it records each reply's settings and token arrival times from the
chat controller's ``reply_started`` / ``reply_tokens`` signals, and follows its own
request id on the client (the chat controller ignores ids it did not start).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Callable, TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

from app.engine.types import SpecConfig, Stats, StopReason, TokenEvent
from app.session.compare import Comparison, TurnRecord, plan_rerun, refusal
from app.storage.settings import Settings
from app.ui.chat_view import ChatView
from app.ui.compare_dialog import CompareDialog
from app.ui.message_view import ASSISTANT, ChatMessage
from app.ui.reply_charts import ReplyStatsView, TokenArrivals
from app.window.chat_controller import ChatController

if TYPE_CHECKING:
    from app.bridge.client import Engine

COMPARE_LABEL = "Compare"
COMPARE_TIP = "Write this reply again without speculation and compare speed and text"
STATS_LABEL = "Stats"
STATS_TIP = "Acceptance by draft position and tokens/s over this reply"
BUSY_TIP = "Wait until the current reply is finished"


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
    """Adds Compare and Stats to every reply of ``chat_view`` and runs the comparisons.

    Signals: ``comparison_finished(Comparison)``, ``comparison_cancelled(int)`` (plain
    tokens written), ``comparison_failed(str)``.
    """

    comparison_finished = Signal(object)
    comparison_cancelled = Signal(int)
    comparison_failed = Signal(str)

    def __init__(self, client: Engine, chat: ChatController, chat_view: ChatView, *,
                 settings: Callable[[], Settings], say: Callable[[str, int], None], dialog_parent: QWidget) -> None:
        """``settings`` gives the settings a reply is asked with now; ``say(text, ms)``
        shows a passing line; dialogs open over ``dialog_parent``, which also owns this."""
        super().__init__(dialog_parent)
        self.client = client
        self.chat = chat
        self.chat_view = chat_view
        self._settings = settings
        self._say = say
        self._dialog_parent = dialog_parent
        # Per reply, dropped with it: what it was asked with, and when its tokens came.
        self._records: weakref.WeakKeyDictionary[ChatMessage, TurnRecord] = weakref.WeakKeyDictionary()
        self._arrivals: weakref.WeakKeyDictionary[ChatMessage, TokenArrivals] = weakref.WeakKeyDictionary()
        self._run: _Run | None = None
        self.dialog: CompareDialog | None = None
        self.stats_view: ReplyStatsView | None = None
        self._stats_reply: weakref.ref | None = None  # the reply the stats view shows

        self.compare_last_action = QAction("&Compare last reply with plain decoding", self)
        self.compare_last_action.triggered.connect(lambda: self.compare())
        self.stats_action = QAction("Last reply's &stats", self)
        self.stats_action.triggered.connect(lambda: self.show_stats())
        self.actions = (self.compare_last_action, self.stats_action)

        chat.reply_started.connect(self._on_reply_started)
        chat.reply_tokens.connect(self._on_reply_tokens)
        chat.reply_finished.connect(self._on_reply_finished)
        client.tokens.connect(self._on_tokens)
        client.finished.connect(self._on_finished)
        client.failed.connect(self._on_failed)
        client.busy_changed.connect(self._update_buttons)

        chat_view.add_reply_action(COMPARE_LABEL, COMPARE_TIP, self.compare)
        chat_view.add_reply_action(STATS_LABEL, STATS_TIP, self.show_stats)
        self._update_buttons(client.busy)

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
        """The turn as the chat would send it now (``recorded``: at the reply's start)."""
        settings = self._settings()
        return TurnRecord(history=tuple(self.chat_view.history(upto=reply)),
                          system_prompt=self.chat.system_prompt(), sampling=self.chat.sampling_config(),
                          max_tokens=settings.max_tokens, models=self.client.spec, recorded=recorded)

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
        why_not = refusal(reply.status, reply.stats, len(reply.events))
        if why_not is not None:
            dialog.show_message("Compare", why_not)
            return None

        record = self._records.get(reply) or self._record_now(reply, recorded=False)
        plan = plan_rerun(record, status=reply.status, tokens=len(reply.events), models_now=self.client.spec)
        request_id = self.client.generate(list(record.history), system_prompt=record.system_prompt,
                                          sampling=record.sampling, spec=SpecConfig(enabled=False),
                                          max_tokens=plan.max_tokens)
        self._run = _Run(request_id, record, list(reply.events), reply.stats, plan.note, [])
        dialog.start(f"Reply {self._reply_number(reply)}: the same turn again, without speculation",
                     plan.expected_tokens, plan.note)
        return request_id

    def cancel(self) -> None:
        if self._run is not None:
            self.client.stop(self._run.request_id)

    def _show_dialog(self) -> CompareDialog:
        if self.dialog is None:
            self.dialog = CompareDialog(self._dialog_parent)
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
        comparison = Comparison.of(run.record.sampling, run.spec_events, run.spec_stats,
                                   run.plain_events, plain_stats, run.note)
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
        self.compare_last_action.setEnabled(not busy)

    # --- Stats ------------------------------------------------------------------------------

    def show_stats(self, reply: ChatMessage | None = None) -> ReplyStatsView | None:
        """Open the stats view on ``reply`` (default: the last reply); None when there is none."""
        reply = reply or self.chat_view.last_reply()
        if reply is None:
            self._say("There is no reply yet.", 3000)
            return None
        if self.stats_view is None:
            self.stats_view = ReplyStatsView(self._dialog_parent)
        self._stats_reply = weakref.ref(reply)
        self._show_stats_of(reply)
        self.stats_view.show()
        self.stats_view.raise_()
        return self.stats_view

    def _show_stats_of(self, reply: ChatMessage) -> None:
        self.stats_view.show_reply(reply.stats, self._arrivals.get(reply), f"reply {self._reply_number(reply)}")

    def _reply_number(self, reply: ChatMessage) -> int:
        replies = [m for m in self.chat_view.messages() if m.role == ASSISTANT]
        return replies.index(reply) + 1 if reply in replies else len(replies)


def install_compare(window) -> CompareController:
    """The window's Compare (``MainWindow`` builds it with its parts): one per window."""
    return window.compare
