"""The chat window: builds the widgets and the controllers and joins them.

The window runs no model code and keeps no chat logic: the replies are the
``ChatController``'s (app/window/chat_controller.py), the history the
``HistoryController``'s (given a ``HistoryStore``), Compare the ``CompareController``'s,
the Help menu the ``HelpController``'s, the settings (in force, on disk, the dialog) the
``SettingsController``'s, the models on screen ``ModelLoading``'s. Each is handed the
widgets and services it works with and makes its own actions; the window places them
in its menus. Left here: the window's own actions, layout, menus, drag and drop,
geometry and shutdown.

Adding a feature: build its controller in ``__init__`` with the parts it needs
(``self.chat`` for the replies and their signals, ``self.chat_view``, ``self.notices``,
``self.side_panel``, ``self.client``, ``self.statusBar().showMessage`` as ``say``),
then place its ``actions`` in ``_build_menus``; per-reply buttons come from
``chat_view.add_reply_action(label, tooltip, handler)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
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

from app.bridge.engine_process import EngineProcessClient
from app.bridge.gpu_poller import GpuPoller
from app.session.records import reply_meta
from app.storage.settings import LoadedSettings, Settings, load_settings
from app.ui.chat_view import ChatView
from app.ui.composer import Composer, model_files
from app.ui.load_banner import LoadBanner
from app.ui.message_view import ChatMessage
from app.ui.notices import INFO, WARNING, NoticeArea
from app.ui.settings_dialog import GGUF_FILTER, SettingsDialog
from app.ui.side_panel import SidePanel
from app.ui.sidebar import ConversationSidebar
from app.ui.stats_format import context_warning
from app.window.chat_controller import ChatController
from app.window.compare_controller import CompareController
from app.window.engine_controller import EngineController
from app.window.help_controller import HelpController
from app.window.history_controller import HistoryController
from app.window.model_loading import APP_NAME, ModelLoading
from app.window.local_worker import LocalWorkerController
from app.window.server_controller import ServerController
from app.window.first_run_controller import needs_first_run
from app.window.steering import install_steering
from app.window.settings_controller import SettingsController

if TYPE_CHECKING:
    from app.bridge.client import Engine

if TYPE_CHECKING:
    from app.storage.history import HistoryStore

MIN_SIZE = (760, 520)
DEFAULT_SIZE = (1180, 780)
SIDE_PANEL_WIDTH = 290
SIDEBAR_WIDTH = 230
TARGET, DRAFT = "target", "draft"
CONTEXT_NOTICE = "context"


class MainWindow(QMainWindow):
    settings_changed = Signal(object)       # Settings

    def __init__(self, loaded: LoadedSettings | None = None, *, client: Engine | None = None,
                 gpu_poller: GpuPoller | None = None, overrides: dict | None = None,
                 history_store: HistoryStore | None = None, first_run: bool = False,
                 parent: QWidget | None = None) -> None:
        """``first_run``: with no model chosen and no demo pair on disk, show the first-run
        screen instead of fetching the demo (the app's start asks for it; tests do not)."""
        super().__init__(parent)
        loaded = loaded or load_settings()
        # First thing: the engine process starts (imports, llama.cpp) while the window builds.
        self.client = client or EngineProcessClient(parent=self)
        if self.client.parent() is None:
            self.client.setParent(self)
        self.notices = NoticeArea(self)
        self.prefs = SettingsController(loaded, self.notices, overrides=overrides,
                                        chat_formats=self.client.chat_format_names, dialog_parent=self)
        self.prefs.changed.connect(self._settings_applied)

        self.setWindowTitle(APP_NAME)
        self.setMinimumSize(*MIN_SIZE)
        self.setAcceptDrops(True)
        self._build_actions()
        self._build_layout()
        if loaded.notice:
            self.notices.show_notice("settings", loaded.notice, WARNING)
        say = self.statusBar().showMessage
        self.chat = ChatController(self.client, self.chat_view, self.side_panel.stats, self.notices,
                                   settings=lambda: self.settings, say=say, parent=self)
        self.chat.conversation_cleared.connect(self.composer.focus)
        self.chat_view.replies_changed.connect(
            lambda: self.side_panel.stats.show_chat_saved(*self.chat_view.time_saved_total()))
        self.chat.reply_finished.connect(self._show_context)
        self.chat.conversation_cleared.connect(lambda: self.notices.clear(CONTEXT_NOTICE))
        # Without a store (tests, the screenshot script) the window keeps nothing.
        self.history = self._build_history(history_store) if history_store is not None else None
        self.compare = CompareController(self.client, self.chat, self.chat_view, settings=lambda: self.settings,
                                         say=say, dialog_parent=self)
        self.help = HelpController(self.client, self.notices, say=say, clear_said=self.statusBar().clearMessage,
                                   dialog_parent=self)
        self.local_server = ServerController(self.client, lambda: self.settings, dialog_parent=self,
                                             save=self.prefs.save)
        self.local_worker = LocalWorkerController(dialog_parent=self)
        self.models = ModelLoading(self.client, banner=self.load_banner, model_label=self.model_label,
                                   stats=self.side_panel.stats, composer=self.composer, notices=self.notices,
                                   settings=lambda: self.settings, say=say, set_title=self.setWindowTitle,
                                   open_settings=self.open_settings, parent=self)
        # The engine in its own process can die and the window stay (EngineController).
        self.engine = EngineController(self.client, self.models, self.notices, say=say,
                                       on_death=(self.local_server.engine_died,), parent=self) \
            if self.client.separate_process else None
        self.client.busy_changed.connect(self._on_busy_changed)
        self.steering = install_steering(self, self.column_layout, self.toolbar)
        self._build_menus()
        self._restore_geometry()

        self.gpu_poller = gpu_poller or GpuPoller(parent=self)
        self.gpu_poller.status_changed.connect(self.side_panel.gpu.show_status)
        self.client.loaded.connect(lambda info: self.side_panel.gpu.show_plan(
            info.memory_plan, info.planned_gpu_bytes, info.allocated_bytes))
        self.gpu_poller.start()
        if first_run and needs_first_run(self.settings):
            self.steering.first_run.start()
        elif not self.models.refuse_crashed_load():
            self.models.load(force=True)
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
        # Reading comfort: the chat's text size, remembered (Ctrl+= and Ctrl++ alike).
        self.zoom_in_action = self._action("Zoom &in", QKeySequence.StandardKey.ZoomIn, lambda: self.chat_view.zoom_in(),
                                           tip="Larger chat text (Ctrl+=)")
        self.zoom_in_action.setShortcuts([QKeySequence("Ctrl+="), QKeySequence("Ctrl++"),
                                          *QKeySequence.keyBindings(QKeySequence.StandardKey.ZoomIn)])
        self.zoom_out_action = self._action("Zoom &out", QKeySequence.StandardKey.ZoomOut,
                                            lambda: self.chat_view.zoom_out(), tip="Smaller chat text (Ctrl+-)")
        self.zoom_out_action.setShortcuts([QKeySequence("Ctrl+-"),
                                           *QKeySequence.keyBindings(QKeySequence.StandardKey.ZoomOut)])
        self.zoom_reset_action = self._action("&Actual size", "Ctrl+0", lambda: self.chat_view.reset_zoom(),
                                              tip="Chat text at its normal size (Ctrl+0)")
        self.stop_action.setEnabled(False)

    def _build_layout(self) -> None:
        self.load_banner = LoadBanner(self)
        self.chat_view = ChatView(show_colours=self.settings.show_colours, zoom=self.settings.text_zoom)
        self.chat_view.zoom_changed.connect(lambda zoom: self.prefs.save({"text_zoom": zoom}))
        self.composer = Composer(self)
        self.composer.send_requested.connect(self.send)
        self.composer.stop_requested.connect(self.stop)
        self.composer.models_dropped.connect(self._models_dropped)

        column = QWidget(self)
        column.setObjectName("chatColumnOuter")
        self.column_layout = column_layout = QVBoxLayout(column)
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
        self.splitter.setSizes([DEFAULT_SIZE[0] - SIDE_PANEL_WIDTH, SIDE_PANEL_WIDTH])
        self.setCentralWidget(self.splitter)

        self.toolbar = toolbar = QToolBar("Main", self)
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

    def _build_history(self, store: HistoryStore) -> HistoryController:
        """The conversation sidebar left of the chat, the import bar in the status bar, the
        controller that keeps them and the store in step."""
        sidebar = ConversationSidebar(self)
        sidebar.setObjectName("conversationSidebar")
        sidebar.setMinimumWidth(180)
        # Long titles end in "…" rather than widening the list behind a scroll bar.
        sidebar.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        sidebar.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.splitter.insertWidget(0, sidebar)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        column, panel = self.splitter.sizes()[1:]
        self.splitter.setSizes([SIDEBAR_WIDTH, max(column - SIDEBAR_WIDTH, 300), panel])
        import_bar = QProgressBar(self)
        self.statusBar().addPermanentWidget(import_bar)
        history = HistoryController(store, chat=self.chat, chat_view=self.chat_view, stats=self.side_panel.stats,
                                    notices=self.notices, sidebar=sidebar, import_bar=import_bar,
                                    reply_meta=lambda: reply_meta(self.settings, self.client.info),
                                    say=self.statusBar().showMessage, dialog_parent=self)
        self.addActions(list(history.actions))  # their shortcuts work with the menu bar hidden
        return history

    def _build_menus(self) -> None:
        bar = self.menuBar()
        history = self.history

        def fill(title: str, *groups) -> None:
            menu = bar.addMenu(title)
            for group in (g for g in groups if g):
                if not menu.isEmpty():
                    menu.addSeparator()
                menu.addActions(list(group))

        fill("&File", (self.new_chat_action,), history and history.file_actions,
             (self.open_target_action, self.open_draft_action), self.steering.file_actions, (self.settings_action, *self.local_server.actions, *self.local_worker.actions),
             (self.quit_action,))
        fill("&Chat", (self.stop_action, self.regenerate_action, self.copy_reply_action), (self.speculation_action,),
             history and history.chat_actions, self.engine and self.engine.actions)
        fill("&View", (self.colours_action, self.side_panel_action),
             (self.zoom_in_action, self.zoom_out_action, self.zoom_reset_action), self.compare.actions)
        fill("&Help", self.help.actions)


    # --- chatting: the chat controller's, reachable from the window -------------------------------

    # What the chat reports, for whoever holds the window (tests, tools/stream_bench.py).
    conversation_cleared = property(lambda self: self.chat.conversation_cleared)
    user_message_added = property(lambda self: self.chat.user_message_added)
    reply_started = property(lambda self: self.chat.reply_started)
    reply_tokens = property(lambda self: self.chat.reply_tokens)
    reply_finished = property(lambda self: self.chat.reply_finished)
    reply_removed = property(lambda self: self.chat.reply_removed)

    @property
    def busy(self) -> bool:
        return self.chat.busy

    def send(self, text: str) -> ChatMessage | None:
        """Add the user's message and start the reply; returns the reply (None when busy)."""
        return self.chat.send(text)

    def stop(self) -> None:
        self.chat.stop()

    def regenerate(self) -> ChatMessage | None:
        return self.chat.regenerate()

    def new_chat(self) -> None:
        self.chat.new_chat()  # the composer takes the focus (conversation_cleared)

    def clear_chat(self) -> None:
        self.chat.clear()

    def copy_last_reply(self) -> None:
        reply = self.chat_view.last_reply()
        if reply is not None:
            reply.copy_to_clipboard()
            self.statusBar().showMessage("Reply copied", 2000)

    def export_conversation(self, path: str | Path, fmt: str) -> Path | None:
        """Write the open conversation to ``path`` ('markdown' or 'json'); None if nothing was written."""
        return self.history.files.export(Path(path), fmt) if self.history is not None else None

    # The Help menu's, as tests reach it.
    check_action = property(lambda self: self.help.check_action)
    last_check = property(lambda self: self.help.last_check)
    last_about = property(lambda self: self.help.last_about)

    def show_about(self) -> None:
        self.help.show_about()

    def _show_context(self, reply: ChatMessage) -> None:
        """Context in view after a reply: its prompt, the share of the context the chat fills,
        the trained context; a notice before the chat starts leaving exchanges out."""
        stats, info = reply.stats, self.client.info
        if stats is None or not stats.prompt_tokens:
            return
        n_ctx = info.n_ctx if info is not None else 0
        used = stats.prompt_tokens + stats.tokens
        self.side_panel.stats.show_context(stats.prompt_tokens, used, n_ctx,
                                           info.n_ctx_train if info is not None else 0)
        warning = None if stats.left_out else context_warning(used, self.settings.max_tokens, n_ctx)
        if warning:
            self.notices.show_notice(CONTEXT_NOTICE, warning, INFO)
        else:
            self.notices.clear(CONTEXT_NOTICE)

    def _on_busy_changed(self, busy: bool) -> None:
        self.composer.set_generating(busy)
        self.stop_action.setEnabled(busy)
        self.regenerate_action.setEnabled(not busy)
        if not busy:
            self.composer.focus()

    # --- models ---------------------------------------------------------------------------------

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

    @property
    def settings(self) -> Settings:
        """The settings in force (command-line overrides included)."""
        return self.prefs.settings

    @property
    def _settings_dialog(self) -> SettingsDialog | None:
        return self.prefs.dialog

    def open_settings(self) -> SettingsDialog:
        """Open the settings dialog (non-modal: replies keep streaming); returns it."""
        return self.prefs.open_dialog()

    def apply_settings(self, settings: Settings) -> None:
        """Use ``settings`` from now on: models reload only when a model setting changed."""
        self.prefs.apply(settings)

    def _settings_applied(self, settings: Settings) -> None:
        self.speculation_action.setChecked(settings.speculation)
        self.colours_action.setChecked(settings.show_colours)
        self.chat_view.set_show_colours(settings.show_colours)
        self.side_panel.stats.show_speculation(settings.speculation, self.client.info)
        self.models.load()
        self.settings_changed.emit(settings)

    def _toggle_speculation(self, on: bool) -> None:
        if on != self.settings.speculation:
            self.apply_settings(self.settings.replace(speculation=on))
            self.statusBar().showMessage(f"Speculation {'on' if on else 'off'} from the next reply", 3000)

    def _toggle_colours(self, on: bool) -> None:
        if on != self.settings.show_colours:
            self.apply_settings(self.settings.replace(show_colours=on))

    def _toggle_side_panel(self, on: bool) -> None:
        if not on and self.side_panel.isVisibleTo(self):
            self._pane_widths = self.splitter.sizes()  # kept for when it shows again (and the next start)
        was_hidden = not self.side_panel.isVisibleTo(self)
        self.side_panel.setVisible(on)
        if on and was_hidden and len(self._pane_widths) == self.splitter.count():
            self.splitter.setSizes(self._pane_widths)

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
        # The panes' widths as "230,660,290"; widths saved for another set of panes (a
        # window without the history sidebar) are not used.
        try:
            widths = [int(width) for width in self.settings.splitter_state.split(",")]
        except ValueError:
            widths = []
        if len(widths) == self.splitter.count() and all(width > 0 for width in widths):
            self.splitter.setSizes(widths)
        self._pane_widths = self.splitter.sizes()
        self.side_panel_action.setChecked(self.settings.side_panel_visible)
        self._toggle_side_panel(self.settings.side_panel_visible)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        geometry = bytes(self.saveGeometry().toBase64()).decode("ascii")
        widths = self.splitter.sizes() if self.side_panel.isVisibleTo(self) else self._pane_widths
        panes = ",".join(str(width) for width in widths)
        self.prefs.save({"window_geometry": geometry, "splitter_state": panes,
                         "side_panel_visible": self.side_panel_action.isChecked()})
        self.chat.abandon()  # saved as stopped before the history lets go of the store
        self.steering.shutdown()
        if self.history is not None:
            self.history.shutdown()
        self.local_server.stop()  # its requests run on the engine thread: stop them first
        self.local_worker.stop()  # a child process: none outlives the window
        self.client.shutdown()
        self.gpu_poller.stop()
        super().closeEvent(event)
