"""The replies of the chat on screen: start one, stream its tokens in, finish, stop, abandon.

The controller turns "send this" into an ``Engine.generate`` request and the
client's ``tokens`` / ``finished`` / ``failed`` for that request into display calls on
the reply's ``ChatMessage`` and the side panel's figures. Whatever else follows the
chat (the history, Compare) listens to its signals instead of to the window:

- ``conversation_cleared``: the chat on screen was emptied (New chat, another chat opened);
- ``user_message_added(ChatMessage)``, ``reply_started(ChatMessage)``;
- ``reply_tokens(ChatMessage, [TokenEvent])``: each batch as it was shown;
- ``reply_finished(ChatMessage)``, with status and stats set. Every reply started here
  ends with it, also when it is abandoned (New chat, another chat, closing: 'stopped');
- ``reply_removed(ChatMessage)``: Regenerate replaced it.

Requests it did not start (a Compare run) carry ids it does not follow, and are ignored.
"""

from __future__ import annotations

import copy
from typing import Callable, Sequence, TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.engine.types import SamplingConfig, SpecConfig, Stats, StopReason, TokenEvent
from app.session import config as session_config
from app.storage.settings import Settings
from app.ui.chat_view import ChatView
from app.ui.message_view import ASSISTANT, COMPLETE, INTERRUPTED, STOPPED, USER, ChatMessage
from app.ui.notices import WARNING, NoticeArea
from app.ui.stats_panel import StatsPanel

if TYPE_CHECKING:
    from app.bridge.client import Engine

TEMPLATE_NOTICE_KEY = "template"


class ChatController(QObject):
    conversation_cleared = Signal()
    user_message_added = Signal(object)     # ChatMessage
    reply_started = Signal(object)          # ChatMessage
    reply_tokens = Signal(object, list)     # ChatMessage, [TokenEvent]
    reply_finished = Signal(object)         # ChatMessage, with status and stats set
    reply_removed = Signal(object)          # ChatMessage (Regenerate replaces it)

    def __init__(self, client: Engine, chat_view: ChatView, stats: StatsPanel, notices: NoticeArea, *,
                 settings: Callable[[], Settings], say: Callable[[str, int], None],
                 parent: QObject | None = None) -> None:
        """``settings`` gives the settings the next reply is asked with (read at each
        start); ``say(text, ms)`` shows a passing line (the window's status bar)."""
        super().__init__(parent)
        self.client = client
        self.chat_view = chat_view
        self.stats = stats
        self.notices = notices
        self._settings = settings
        self._say = say
        self._replies: dict[int, ChatMessage] = {}  # request id -> the reply it fills
        # What the next reply is asked with; the chat's preset replaces it (preset_controller).
        self.system_prompt: Callable[[], str] = lambda: self._settings().system_prompt
        self._live_stats: dict[int, Stats] = {}     # request id -> its latest live snapshot
        # The history's id of the chat on screen (history_controller sets it): the engine
        # keeps each chat's cache on disk while another runs, and finds it by this id.
        self.conversation: Callable[[], int | None] = lambda: None
        client.tokens.connect(self._on_tokens)
        client.finished.connect(self._on_finished)
        client.failed.connect(self._on_failed)
        client.died.connect(self.interrupt)

    # --- what the user asks for -----------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.client.busy

    @property
    def streaming(self) -> list[ChatMessage]:
        """The replies being written now (at most one: the engine writes one at a time)."""
        return list(self._replies.values())

    def send(self, text: str) -> ChatMessage | None:
        """Add the user's message and start the reply; returns the reply (None when busy)."""
        text = text.strip()
        if not text or self.client.busy:
            return None
        self.user_message_added.emit(self.chat_view.add_user_message(text))
        return self.start_reply()

    def stop(self) -> None:
        self.client.stop()

    def regenerate(self) -> ChatMessage | None:
        """Drop the last reply and write it again with the current settings."""
        messages = self.chat_view.messages()
        if self.client.busy or not messages:
            return None
        last = messages[-1]
        replaced: tuple[str, ...] = ()
        if last.role == ASSISTANT:
            replaced = (last.text(),) if last.text() else ()  # copied from where it repeats
            self.chat_view.remove_message(last)
            self.reply_removed.emit(last)
        return self.start_reply(replaced=replaced)

    def new_chat(self) -> None:
        self.clear()
        self.conversation_cleared.emit()

    def clear(self) -> None:
        """Empty the conversation on screen; a reply still streaming ends as 'stopped' first."""
        self.abandon()
        self.chat_view.clear()
        self.stats.clear_stats()

    def abandon(self) -> None:
        """End every reply being written as 'stopped', with what it showed.

        The engine stops within a round; its late tokens and its ``finished`` carry an id
        no longer followed. ``reply_finished`` lets the history record the reply as
        stopped instead of losing it."""
        self.client.stop()
        replies, self._replies = self._replies, {}
        for request_id, reply in replies.items():
            stats = self._live_stats.pop(request_id, None)
            if stats is not None:
                stats.stop_reason = StopReason.CANCELLED
            reply.finish(stats, STOPPED)
            self.reply_finished.emit(reply)
        self._live_stats.clear()

    def interrupt(self, why: str = "") -> None:
        """The engine died: every reply being written ends as 'interrupted', with what it
        showed (as a crash of the whole app leaves it), and the history keeps it so."""
        replies, self._replies = self._replies, {}
        for request_id, reply in replies.items():
            reply.finish(self._live_stats.pop(request_id, None), INTERRUPTED)
            self.reply_finished.emit(reply)
        self._live_stats.clear()

    def sampling_config(self) -> SamplingConfig:
        return session_config.sampling_config(self._settings())

    def spec_config(self) -> SpecConfig:
        return session_config.spec_config(self._settings())

    def start_reply(self, replaced: Sequence[str] = ()) -> ChatMessage | None:
        """Ask for a reply to the conversation on screen (which must end with the user);
        ``replaced``: the replies it replaces, which the engine may copy from."""
        history = self.chat_view.history()
        if not history or history[-1][0] != USER:
            return None
        settings = self._settings()
        reply = self.chat_view.add_reply()
        reply.request_id = self.client.generate(
            history, system_prompt=self.system_prompt(), sampling=self.sampling_config(),
            spec=self.spec_config(), max_tokens=settings.max_tokens, replaced=replaced,
            chat=self.conversation())
        self._replies[reply.request_id] = reply
        self.reply_started.emit(reply)
        return reply

    # --- what the engine reports ----------------------------------------------------------

    def _on_tokens(self, request_id: int, events: list[TokenEvent], stats: Stats | None) -> None:
        reply = self._replies.get(request_id)
        if reply is None:
            return  # someone else's request (e.g. a Compare run)
        self.chat_view.append_tokens(reply, events)
        if stats is not None:
            self._live_stats[request_id] = copy.copy(stats)
            self.stats.show_stats(stats, live=True)
            self._show_prompt_notice(stats)
        self.reply_tokens.emit(reply, events)

    def _on_finished(self, request_id: int, stats: Stats) -> None:
        reply = self._replies.pop(request_id, None)
        self._live_stats.pop(request_id, None)
        if reply is None:
            return
        reply.finish(stats, STOPPED if stats.stop_reason == StopReason.CANCELLED else COMPLETE)
        self.stats.show_stats(stats, live=False)
        self._show_prompt_notice(stats)
        self.reply_finished.emit(reply)

    def _on_failed(self, request_id: int, message: str) -> None:
        reply = self._replies.pop(request_id, None)
        self._live_stats.pop(request_id, None)
        if reply is None:
            return
        reply.fail(message)
        self._say(message, 8000)
        self.reply_finished.emit(reply)

    def _show_prompt_notice(self, stats: Stats) -> None:
        # The model's chat template failed and the reply went ahead with ChatML: say so,
        # until a reply renders with the template again.
        if stats.prompt_notice:
            self.notices.show_notice(TEMPLATE_NOTICE_KEY, stats.prompt_notice, WARNING)
        else:
            self.notices.clear(TEMPLATE_NOTICE_KEY)
