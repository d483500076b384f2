"""The chat window: wires the composer, the conversation, the side panel and the engine client.

The window never runs model code: it turns user actions into ``EngineClient``
requests and engine signals into display calls. Later features attach here:

- chat history: given a ``HistoryStore``, the window builds a ``HistoryController``
  (app/ui/history_controller.py) that puts a conversation sidebar left of the chat
  (``set_conversation_sidebar``), records what the ``conversation_cleared`` /
  ``user_message_added`` / ``reply_started`` / ``reply_tokens`` / ``reply_finished`` /
  ``reply_removed`` signals report, and rebuilds stored conversations with
  ``ChatView.add_user_message`` / ``add_reply(events, stats, status)``. Every reply the
  window started ends with ``reply_finished``, also when New chat, switching
  conversations or closing the window cuts it off (status 'stopped');
- per-reply actions (Compare, ...): ``chat_view.add_reply_action(label, tooltip, handler)``;
  ``client.generate(...)`` returns a request id whose ``tokens``/``finished``
  signals the caller can follow (the window ignores ids it did not start).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QStyle,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.bridge.async_glue import PairChecker
from app.bridge.gpu_poller import GpuPoller
from app.bridge.models import LoadInfo, ModelSpec
from app.bridge.worker import EngineClient
from app.engine.types import (SPECULATION_OFF, DrafterKind, SamplingConfig, SpecConfig, Stats, StopReason,
                              TokenEvent)
from app.errors import TandemError
from app.session import config as session_config
from app.storage import load_marker
from app.storage.settings import LoadedSettings, Settings, load_settings, save_settings
from app.ui.about import about_details
from app.ui.chat_view import ChatView
from app.window.compare_controller import install_compare
from app.ui.composer import Composer, model_files
from app.window.history_controller import EXPORT_FORMATS, HistoryController
from app.ui.message_view import COMPLETE, STOPPED, ChatMessage
from app.ui.notices import ERROR, INFO, WARNING, NoticeArea
from app.ui.settings_dialog import GGUF_FILTER, SettingsDialog
from app.ui.side_panel import SidePanel

if TYPE_CHECKING:
    from app.storage.history import HistoryStore

APP_NAME = "Tandem"
MIN_SIZE = (760, 520)
DEFAULT_SIZE = (1180, 780)
TARGET, DRAFT = "target", "draft"


class LoadBanner(QFrame):
    """Shown while models load (and, on first run, while the demo pair is fetched)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("loadBanner")
        self.label = QLabel("Loading models…", self)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.bar = QProgressBar(self)
        self.bar.setObjectName("loadProgress")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 4)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)

    def show_progress(self, stage: str, fraction: float) -> None:
        self.label.setText(stage + "…")
        if fraction < 0:
            self.bar.setRange(0, 0)  # busy indicator: size unknown
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(round(fraction * 1000))


class MainWindow(QMainWindow):
    conversation_cleared = Signal()
    user_message_added = Signal(object)     # ChatMessage
    reply_started = Signal(object)          # ChatMessage
    reply_tokens = Signal(object, list)     # ChatMessage, [TokenEvent]
    reply_finished = Signal(object)         # ChatMessage, with status and stats set
    reply_removed = Signal(object)          # ChatMessage (Regenerate replaces it)
    settings_changed = Signal(object)       # Settings

    def __init__(self, loaded: LoadedSettings | None = None, *, client: EngineClient | None = None,
                 gpu_poller: GpuPoller | None = None, overrides: dict | None = None,
                 history_store: HistoryStore | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        loaded = loaded or load_settings()
        self._saved = loaded.settings  # what is on disk; command-line overrides stay out of it
        self.settings = loaded.settings.replace(**(overrides or {}))
        self.client = client or EngineClient(parent=self)
        if self.client.parent() is None:
            self.client.setParent(self)
        self._replies: dict[int, ChatMessage] = {}  # request id -> the reply it fills
        self._live_stats: dict[int, Stats] = {}     # request id -> its latest live snapshot
        self._settings_dialog: SettingsDialog | None = None
        self._pair_checker = PairChecker(self)
        self._pair_checker.checked.connect(self._show_pair_check)

        self.setWindowTitle(APP_NAME)
        self.setMinimumSize(*MIN_SIZE)
        self.setAcceptDrops(True)
        self._build_actions()
        self._build_layout()
        self._build_menus()
        self._connect_client()
        self._restore_geometry()
        if loaded.notice:
            self.notices.show_notice("settings", loaded.notice, WARNING)
        # Without a store (tests, the screenshot script) the window keeps nothing.
        self.history = HistoryController(self, history_store) if history_store is not None else None
        for action in self._history_actions:
            action.setVisible(self.history is not None)
        self.compare = install_compare(self)

        self.gpu_poller = gpu_poller or GpuPoller(parent=self)
        self.gpu_poller.status_changed.connect(self.side_panel.gpu.show_status)
        self.gpu_poller.start()
        if not self._refuse_crashed_load():
            self._load_models(force=True)
        self.composer.focus()

    # --- building -------------------------------------------------------------------------------

    def _action(self, text: str, shortcut: QKeySequence | str | None, slot, *, icon: QStyle.StandardPixmap | None = None,
                tip: str = "", checkable: bool = False) -> QAction:
        action = QAction(text, self)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if icon is not None:
            action.setIcon(self.style().standardIcon(icon))
        action.setToolTip(tip or text.replace("&", ""))
        action.setCheckable(checkable)
        action.triggered.connect(slot)
        self.addAction(action)  # shortcuts work even with the menu bar hidden
        return action

    def _build_actions(self) -> None:
        sp = QStyle.StandardPixmap
        self.new_chat_action = self._action("&New chat", QKeySequence.StandardKey.New, self.new_chat,
                                            icon=sp.SP_FileDialogNewFolder, tip="Start a new conversation (Ctrl+N)")
        self.stop_action = self._action("&Stop", "Esc", self.stop, icon=sp.SP_MediaStop, tip="Stop the reply (Esc)")
        self.regenerate_action = self._action("&Regenerate", "Ctrl+R", self.regenerate, icon=sp.SP_BrowserReload,
                                              tip="Write the last reply again (Ctrl+R)")
        self.copy_reply_action = self._action("&Copy last reply", "Ctrl+Shift+C", self.copy_last_reply,
                                              tip="Copy the last reply's text")
        self.settings_action = self._action("&Settings…", QKeySequence.StandardKey.Preferences, self.open_settings,
                                            icon=sp.SP_FileDialogDetailedView, tip="Models, speculation, sampling")
        if self.settings_action.shortcut().isEmpty():
            self.settings_action.setShortcut(QKeySequence("Ctrl+,"))
        self.open_target_action = self._action("Open &target model…", "Ctrl+O", lambda: self.choose_model(TARGET))
        self.open_draft_action = self._action("Open &draft model…", "Ctrl+Shift+O", lambda: self.choose_model(DRAFT))
        self.quit_action = self._action("&Quit", QKeySequence.StandardKey.Quit, self.close)
        self.speculation_action = self._action("S&peculation", "Ctrl+Shift+S", self._toggle_speculation,
                                               tip="Speculative decoding on or off for the next reply",
                                               checkable=True)
        self.speculation_action.setChecked(self.settings.speculation)
        self.colours_action = self._action("Show token &colours", "Ctrl+Shift+K", self._toggle_colours,
                                           tip="Colour tokens by what happened to them", checkable=True)
        self.colours_action.setChecked(self.settings.show_colours)
        self.side_panel_action = self._action("Show side &panel", "F9", self._toggle_side_panel, checkable=True)
        self.side_panel_action.setChecked(True)
        self.about_action = self._action("&About Tandem", None, self.show_about)
        self.log_folder_action = self._action("Open &log folder", None, self.open_log_folder,
                                              tip="Show the folder with Tandem's log files")
        self.check_action = self._action("&Check speculation", None, self.check_speculation,
                                         tip="Generate 64 tokens with and without speculation and compare")
        # Chat history (shown only when the window has a history store).
        self.export_markdown_action = self._action("Export conversation as &Markdown…", None,
                                                   lambda: self.export_conversation_dialog("markdown"),
                                                   tip="Save this conversation as a Markdown file")
        self.export_json_action = self._action("Export conversation as &JSON…", None,
                                               lambda: self.export_conversation_dialog("json"),
                                               tip="Save this conversation with token kinds and stats")
        self.import_action = self._action("&Import conversation…", None, self.import_conversation_dialog,
                                          tip="Add a conversation exported as JSON")
        self.search_chats_action = self._action("&Search chats", QKeySequence.StandardKey.Find, self._search_chats,
                                                tip="Search chat titles and text (Ctrl+F)")
        self.rename_chat_action = self._action("Re&name chat", "F2", self._rename_chat,
                                               tip="Rename the selected chat (F2)")
        # No window-wide Delete shortcut: Delete edits text in the composer. The list
        # itself deletes the selected chat on Delete.
        self.delete_chat_action = self._action("&Delete chat", None, self._delete_chat,
                                               tip="Delete the selected chat (Delete in the list; undo follows)")
        self._history_actions = (self.export_markdown_action, self.export_json_action, self.import_action,
                                 self.search_chats_action, self.rename_chat_action, self.delete_chat_action)
        self.export_markdown_action.setEnabled(False)
        self.export_json_action.setEnabled(False)
        self.stop_action.setEnabled(False)

    def _build_layout(self) -> None:
        self.notices = NoticeArea(self)
        self.load_banner = LoadBanner(self)
        self.chat_view = ChatView(show_colours=self.settings.show_colours)
        self.composer = Composer(self)
        self.composer.send_requested.connect(self.send)
        self.composer.stop_requested.connect(self.stop)
        self.composer.models_dropped.connect(self._models_dropped)

        column = QWidget(self)
        column.setObjectName("chatColumnOuter")
        column_layout = QVBoxLayout(column)
        column_layout.setContentsMargins(12, 8, 8, 12)
        column_layout.setSpacing(8)
        column_layout.addWidget(self.notices)
        column_layout.addWidget(self.load_banner)
        column_layout.addWidget(self.chat_view, 1)
        column_layout.addWidget(self.composer)

        self.side_panel = SidePanel(self.colours_action, self)
        self.side_panel.legend.set_style(self.chat_view.token_style)
        self.chat_view.style_changed.connect(self.side_panel.legend.set_style)

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(column)
        self.splitter.addWidget(self.side_panel)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 0)
        self.splitter.setSizes([DEFAULT_SIZE[0] - 290, 290])
        self.setCentralWidget(self.splitter)

        toolbar = QToolBar("Main", self)
        toolbar.setObjectName("mainToolbar")
        toolbar.setMovable(False)
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        for action in (self.new_chat_action, self.regenerate_action, self.stop_action, None,
                       self.speculation_action, self.settings_action):
            toolbar.addSeparator() if action is None else toolbar.addAction(action)
        self.addToolBar(toolbar)

        self.model_label = QLabel(self)
        self.model_label.setTextFormat(Qt.TextFormat.PlainText)
        self.statusBar().addPermanentWidget(self.model_label)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        for action in (self.new_chat_action, None, self.export_markdown_action, self.export_json_action,
                       self.import_action, None, self.open_target_action, self.open_draft_action, None,
                       self.settings_action, None, self.quit_action):
            file_menu.addSeparator() if action is None else file_menu.addAction(action)
        chat_menu = bar.addMenu("&Chat")
        for action in (self.stop_action, self.regenerate_action, self.copy_reply_action, None,
                       self.speculation_action, None, self.search_chats_action, self.rename_chat_action,
                       self.delete_chat_action):
            chat_menu.addSeparator() if action is None else chat_menu.addAction(action)
        view_menu = bar.addMenu("&View")
        view_menu.addAction(self.colours_action)
        view_menu.addAction(self.side_panel_action)
        help_menu = bar.addMenu("&Help")
        help_menu.addAction(self.check_action)
        help_menu.addAction(self.log_folder_action)
        help_menu.addAction(self.about_action)

    def _connect_client(self) -> None:
        client = self.client
        client.load_progress.connect(self._on_load_progress)
        client.loaded.connect(self._on_loaded)
        client.load_failed.connect(self._on_load_failed)
        client.tokens.connect(self._on_tokens)
        client.finished.connect(self._on_finished)
        client.failed.connect(self._on_failed)
        client.busy_changed.connect(self._on_busy_changed)

    # --- hooks for later features -------------------------------------------------------------

    def set_conversation_sidebar(self, sidebar: QWidget) -> None:
        """Put a conversation list left of the chat (issue 4's ConversationSidebar)."""
        self.splitter.insertWidget(0, sidebar)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)

    # --- chatting -------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.client.busy

    def send(self, text: str) -> ChatMessage | None:
        """Add the user's message and start the reply; returns the reply (None when busy)."""
        text = text.strip()
        if not text or self.client.busy:
            return None
        self.user_message_added.emit(self.chat_view.add_user_message(text))
        return self._start_reply()

    def stop(self) -> None:
        self.client.stop()

    def regenerate(self) -> ChatMessage | None:
        """Drop the last reply and write it again with the current settings."""
        messages = self.chat_view.messages()
        if self.client.busy or not messages:
            return None
        last = messages[-1]
        if last.role == "assistant":
            self.chat_view.remove_message(last)
            self.reply_removed.emit(last)
        return self._start_reply()

    def new_chat(self) -> None:
        self.clear_chat()
        self.conversation_cleared.emit()
        self.composer.focus()

    def clear_chat(self) -> None:
        """Empty the conversation on screen; a reply still streaming ends as 'stopped' first."""
        self._abandon_replies()
        self.chat_view.clear()
        self.side_panel.stats.clear_stats()

    def _abandon_replies(self) -> None:
        # The engine stops within a round; its late tokens and its ``finished`` carry an id
        # the window no longer follows. The reply keeps what was shown and says so, and
        # ``reply_finished`` lets the history record it as stopped instead of losing it.
        self.client.stop()
        replies, self._replies = self._replies, {}
        for request_id, reply in replies.items():
            stats = self._live_stats.pop(request_id, None)
            if stats is not None:
                stats.stop_reason = StopReason.CANCELLED
            reply.finish(stats, STOPPED)
            self.reply_finished.emit(reply)
        self._live_stats.clear()

    def copy_last_reply(self) -> None:
        reply = self.chat_view.last_reply()
        if reply is not None:
            reply.copy_to_clipboard()
            self.statusBar().showMessage("Reply copied", 2000)

    def sampling_config(self) -> SamplingConfig:
        return session_config.sampling_config(self.settings)

    def spec_config(self) -> SpecConfig:
        return session_config.spec_config(self.settings)

    def _start_reply(self) -> ChatMessage | None:
        history = self.chat_view.history()
        if not history or history[-1][0] != "user":
            return None
        reply = self.chat_view.add_reply()
        reply.request_id = self.client.generate(
            history, system_prompt=self.settings.system_prompt, sampling=self.sampling_config(),
            spec=self.spec_config(), max_tokens=self.settings.max_tokens)
        self._replies[reply.request_id] = reply
        self.reply_started.emit(reply)
        return reply

    def _on_tokens(self, request_id: int, events: list[TokenEvent], stats: Stats | None) -> None:
        reply = self._replies.get(request_id)
        if reply is None:
            return  # someone else's request (e.g. a Compare run)
        self.chat_view.append_tokens(reply, events)
        if stats is not None:
            self._live_stats[request_id] = copy.copy(stats)
            self.side_panel.stats.show_stats(stats, live=True)
            self._show_prompt_notice(stats)
        self.reply_tokens.emit(reply, events)

    def _on_finished(self, request_id: int, stats: Stats) -> None:
        reply = self._replies.pop(request_id, None)
        self._live_stats.pop(request_id, None)
        if reply is None:
            return
        reply.finish(stats, STOPPED if stats.stop_reason == StopReason.CANCELLED else COMPLETE)
        self.side_panel.stats.show_stats(stats, live=False)
        self._show_prompt_notice(stats)
        self.reply_finished.emit(reply)

    def _show_prompt_notice(self, stats: Stats) -> None:
        # The model's chat template failed and the reply went ahead with ChatML: say so,
        # until a reply renders with the template again.
        if stats.prompt_notice:
            self.notices.show_notice("template", stats.prompt_notice, WARNING)
        else:
            self.notices.clear("template")

    def _on_failed(self, request_id: int, message: str) -> None:
        reply = self._replies.pop(request_id, None)
        self._live_stats.pop(request_id, None)
        if reply is None:
            return
        reply.fail(message)
        self.statusBar().showMessage(message, 8000)
        self.reply_finished.emit(reply)

    def _on_busy_changed(self, busy: bool) -> None:
        self.composer.set_generating(busy)
        self.stop_action.setEnabled(busy)
        self.regenerate_action.setEnabled(not busy)
        if not busy:
            self.composer.focus()

    # --- chat history ---------------------------------------------------------------------------

    def export_conversation_dialog(self, fmt: str) -> None:
        if self.history is None or self.history.current_id is None:
            return
        suffix, name_filter = EXPORT_FORMATS[fmt]
        start = Path.home() / (self.history.suggested_file_name() + suffix)
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", str(start), name_filter)
        if path:
            self.export_conversation(path, fmt)

    def export_conversation(self, path: str | Path, fmt: str) -> Path | None:
        """Write the open conversation to ``path`` ('markdown' or 'json'); None if nothing was written."""
        if self.history is None:
            return None
        written = self.history.export_current(Path(path), fmt)
        if written is not None:
            self.statusBar().showMessage(f"Conversation exported to {written}", 5000)
        return written

    def import_conversation_dialog(self) -> None:
        if self.history is None:
            return
        path, _ = QFileDialog.getOpenFileName(self, "Import conversation", str(Path.home()),
                                              EXPORT_FORMATS["json"][1])
        if path:
            self.history.import_file(Path(path))

    def _search_chats(self) -> None:
        if self.history is not None:
            search = self.history.sidebar.search_edit
            search.setFocus(Qt.FocusReason.ShortcutFocusReason)
            search.selectAll()

    def _rename_chat(self) -> None:
        if self.history is not None:
            self.history.sidebar.rename_current()

    def _delete_chat(self) -> None:
        if self.history is not None:
            self.history.sidebar.delete_current()

    # --- models ---------------------------------------------------------------------------------

    def _refuse_crashed_load(self) -> bool:
        """No crash loop: if the last start died while loading these very models, do not
        load them again; say so and open the settings (OK there, or other files, retries)."""
        crashed = load_marker.crashed_load()
        if crashed is None or not crashed.matches(self.settings.target_path, self.settings.draft_path):
            return False
        self.load_banner.hide()
        self.model_label.setText("No model loaded")
        self.side_panel.stats.show_models(None, "not loaded")
        self.composer.set_ready(False)
        self.notices.show_notice(
            "load", f"Tandem closed while loading {crashed.describe()} (started {crashed.started}), "
                    "so they were not loaded again: llama.cpp may have crashed on them. Choose other "
                    "files in Settings, or press OK there to try these again.", ERROR)
        QTimer.singleShot(0, self.open_settings)
        return True

    def _load_models(self, force: bool = False) -> None:
        spec = ModelSpec.from_settings(self.settings)
        if force:
            self.client.load(spec)
        elif not self.client.ensure_loaded(spec):
            return
        self.notices.clear("load")
        self.model_label.setText("Loading models…")
        self.load_banner.show_progress("Loading models", -1)
        self.load_banner.show()
        self.side_panel.stats.show_models(None, "loading…")
        self.side_panel.stats.show_speculation(self.settings.speculation, None)

    def _on_load_progress(self, stage: str, fraction: float) -> None:
        self.load_banner.show_progress(stage, fraction)
        self.load_banner.show()

    def _on_loaded(self, info: LoadInfo) -> None:
        self.load_banner.hide()
        self.composer.set_ready(True)
        drafter = ("prompt lookup" if info.drafter == DrafterKind.LOOKUP else f"draft {info.draft_name}"
                   if info.draft_name else "no draft")
        self.model_label.setText(f"{info.target_name} · {drafter} · {info.compute}")
        self.setWindowTitle(f"{APP_NAME} — {info.target_name}")
        self.side_panel.stats.show_models(info)
        self.side_panel.stats.show_speculation(self.settings.speculation, info)
        if info.failed_rule:
            self.notices.show_notice(
                "draft", f"{info.note} (failed rule: {info.failed_rule}). "
                         "Chatting continues without speculation.", WARNING)
        elif not info.speculation_available and info.note and info.note != SPECULATION_OFF:
            self.notices.show_notice("draft", f"Speculation unavailable: {info.note}.", INFO)
        else:
            self.notices.clear("draft")
        self.statusBar().showMessage("Models loaded", 3000)

    def _on_load_failed(self, message: str) -> None:
        self.load_banner.hide()
        self.model_label.setText("No model loaded")
        self.side_panel.stats.show_models(None, "not loaded")
        self.composer.set_ready(False)
        self.notices.show_notice("load", f"Could not load the models: {message} "
                                         "Choose other files in Settings (Ctrl+,) or drop a .gguf here.", ERROR)

    def choose_model(self, role: str) -> None:
        current = self.settings.target_path if role == TARGET else self.settings.draft_path
        path, _ = QFileDialog.getOpenFileName(self, f"Choose the {role} model",
                                              str(Path(current).parent) if current else str(Path.home()),
                                              GGUF_FILTER)
        if path:
            self.use_model(path, role)

    def use_model(self, path: str, role: str) -> None:
        """Make ``path`` the target or the draft (a reload follows)."""
        change = {"target_path": path} if role == TARGET else {"draft_path": path, "drafter": "model"}
        self.apply_settings(self.settings.replace(**change))

    # --- settings -------------------------------------------------------------------------------

    def open_settings(self) -> SettingsDialog:
        """Open the dialog with ``open()`` (not ``exec()``: replies keep streaming); returns it."""
        dialog = SettingsDialog(self.settings, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.compatibility_check_requested.connect(self._check_pair)
        dialog.accepted.connect(lambda: self.apply_settings(dialog.settings()))
        dialog.finished.connect(lambda _result: self._forget_dialog(dialog))
        self._settings_dialog = dialog
        dialog.open()
        return dialog

    def _check_pair(self, target: str, draft: str) -> None:
        self._pair_checker.check(target, draft)

    def _show_pair_check(self, target: str, draft: str, ok: bool, rule: object, reason: str) -> None:
        if self._settings_dialog is not None:
            self._settings_dialog.show_compatibility(target, draft, ok, rule, reason)

    def _forget_dialog(self, dialog: SettingsDialog) -> None:
        # Closed dialogs delete themselves; an answer arriving later must not reach one.
        if self._settings_dialog is dialog:
            self._settings_dialog = None

    def apply_settings(self, settings: Settings) -> None:
        """Use ``settings`` from now on: models reload only when a model setting changed."""
        changed = {k for k, v in settings.to_dict().items() if getattr(self.settings, k) != v}
        self.settings = settings
        self._save({k: getattr(settings, k) for k in changed})
        self.speculation_action.setChecked(settings.speculation)
        self.colours_action.setChecked(settings.show_colours)
        self.chat_view.set_show_colours(settings.show_colours)
        self.side_panel.stats.show_speculation(settings.speculation, self.client.info)
        self._load_models()
        self.settings_changed.emit(settings)

    def _save(self, changes: dict) -> None:
        if not changes:
            return
        try:
            self._saved = self._saved.replace(**changes)
            save_settings(self._saved)
        except TandemError as exc:
            self.notices.show_notice("save", str(exc), ERROR)

    def _toggle_speculation(self, on: bool) -> None:
        if on != self.settings.speculation:
            self.apply_settings(self.settings.replace(speculation=on))
            self.statusBar().showMessage(f"Speculation {'on' if on else 'off'} from the next reply", 3000)

    def _toggle_colours(self, on: bool) -> None:
        if on != self.settings.show_colours:
            self.apply_settings(self.settings.replace(show_colours=on))


    def _toggle_side_panel(self, on: bool) -> None:
        self.side_panel.setVisible(on)

    def check_speculation(self) -> None:
        """Help → Check speculation: the self-test on the loaded pair, off the UI thread."""
        if self.client.busy or self.client.loading:
            self.notices.show_notice("check", "Wait for the current reply or load to finish first.", INFO)
            return
        self.check_action.setEnabled(False)
        self.statusBar().showMessage("Checking speculation (64 tokens with and without a draft)…")
        self.client.checked.connect(self._show_check_result, Qt.ConnectionType.SingleShotConnection)
        self.client.check_speculation()

    def _show_check_result(self, report) -> None:
        self.check_action.setEnabled(True)
        self.statusBar().clearMessage()
        box = QMessageBox(self)
        box.setWindowTitle("Check speculation")
        box.setTextFormat(Qt.TextFormat.PlainText)
        if isinstance(report, str):
            box.setIcon(QMessageBox.Icon.Warning)
            box.setText(report)
        else:
            box.setIcon(QMessageBox.Icon.Information if report.ok else QMessageBox.Icon.Warning)
            box.setText("\n".join(report.lines()))
        self.last_check = report
        box.open()

    def show_about(self) -> None:
        box = QMessageBox(self)
        box.setWindowTitle("About Tandem")
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText("Tandem — chat with local GGUF models, sped up losslessly by a draft model.\n\n"
                    "The reply is exactly what the target model alone would write; colours show "
                    "which tokens the draft guessed right.\n\n" + about_details())
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.last_about = box
        box.open()

    def open_log_folder(self) -> None:
        from app.logs import log_file

        QDesktopServices.openUrl(QUrl.fromLocalFile(str(log_file().parent)))

    # --- drag and drop --------------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if model_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:  # noqa: N802
        self.dragEnterEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        paths = model_files(event.mimeData())
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self._models_dropped(paths)

    def _models_dropped(self, paths: list[str]) -> None:
        role = self.ask_model_role(paths[0])
        if role in (TARGET, DRAFT):
            self.use_model(paths[0], role)

    def ask_model_role(self, path: str) -> str | None:
        """Target, draft or neither (None) for a dropped file; tests replace this."""
        box = QMessageBox(self)
        box.setWindowTitle("Use this model")
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText(f"Use {Path(path).name} as the target or as the draft model?")
        box.setInformativeText("The target writes the reply; the draft is a small model of the "
                               "same family that guesses ahead.")
        target = box.addButton("Use as target", QMessageBox.ButtonRole.AcceptRole)
        draft = box.addButton("Use as draft", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return {target: TARGET, draft: DRAFT}.get(box.clickedButton())

    # --- geometry and shutdown ------------------------------------------------------------------

    def _restore_geometry(self) -> None:
        saved = self.settings.window_geometry
        if not (saved and self.restoreGeometry(QByteArray.fromBase64(saved.encode("ascii")))):
            self.resize(*DEFAULT_SIZE)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        geometry = bytes(self.saveGeometry().toBase64()).decode("ascii")
        self._save({"window_geometry": geometry})
        self._abandon_replies()  # saved as stopped before the history lets go of the store
        if self.history is not None:
            self.history.shutdown()
        self.client.shutdown()
        self.gpu_poller.stop()
        super().closeEvent(event)
