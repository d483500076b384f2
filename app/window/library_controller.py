"""The model library in the window: File → Model library…, File → Recent pairs.

The scan and the draft finder (``app.library``, no Qt) run on a plain thread each and
answer through queued signals, so a scan of a large folder never freezes the window;
the dialog only displays and emits. Choosing a pair applies it to the settings (a
reload follows), remembers it among the recent pairs, and offers "Check speculation"
(the self-test), run once the pair has loaded.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable, TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget

from app.drafter_kinds import Needs, needs
from app.engine.gguf.header import shown_name
from app.engine.types import DrafterKind
from app.library.drafts import find_drafts
from app.session.fit import describe, plan_files, read_machine
from app.library.entries import read_entry
from app.library.locations import FOLDER
from app.library.scan import ScanResult, library_locations, scan_library
from app.storage.settings import MAX_FOLDERS, Settings, with_chat_format, with_recent_pair
from app.ui.library_dialog import LibraryDialog
from app.window.background_job import BackgroundJob
from app.window.draft_task import DraftTask

if TYPE_CHECKING:
    from app.bridge.client import Engine

log = logging.getLogger(__name__)


PLANNED_MOST = 12  # drafts given a memory plan in the finder (the best first)


def memory_plans(target: str, drafts: list[str], settings: Settings) -> dict[str, str]:
    """{draft path: describe(plan)} of each draft beside ``target`` at the settings' context
    and GPU layers; a file that cannot be planned is left out (its verdict says why)."""
    from app.errors import TandemError

    machine = read_machine()
    plans = {}
    for draft in drafts:
        try:
            plans[draft] = describe(plan_files(target, draft, n_ctx=settings.n_ctx, machine=machine,
                                               target_gpu_layers=settings.target_gpu_layers,
                                               draft_gpu_layers=settings.draft_gpu_layers,
                                               flash_attention=settings.flash_attention))
        except TandemError:
            continue
    return plans


def _job(work, parent: QObject) -> BackgroundJob:
    return BackgroundJob(work, parent, name="tandem-library",
                         failure=lambda exc: f"The model library could not finish: {exc}")


class LibraryController(QObject):
    pair_set = Signal(str, str)  # target, draft: applied to the settings

    def __init__(self, client: Engine, *, settings: Callable[[], Settings],
                 apply: Callable[[Settings], None], check_speculation: Callable[[], None],
                 say: Callable[[str, int], None], dialog_parent: QWidget) -> None:
        super().__init__(dialog_parent)
        self.client = client
        self._settings = settings
        self._apply = apply
        self._check_speculation = check_speculation
        self._say = say
        self._dialog_parent = dialog_parent
        self.dialog: LibraryDialog | None = None
        self.result: ScanResult | None = None
        self._scan: BackgroundJob | None = None
        self._drafts: BackgroundJob | None = None
        self.draft_task: DraftTask | None = None
        self._extra_paths: list[str] = []  # files chosen by hand, perhaps outside every scanned place
        self._pending_target: str | None = None
        start = settings()
        self._last_pair = (start.target_path, start.draft_path)  # the pair a change is judged against
        self.library_action = QAction("Model &library…", self)
        self.library_action.setShortcut("Ctrl+L")
        self.library_action.setToolTip("The GGUF files on this computer, and drafts for a target (Ctrl+L)")
        self.library_action.triggered.connect(lambda: self.open())
        self.recent_menu = QMenu("Recent &pairs", dialog_parent)
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        self.actions = (self.library_action, self.recent_menu.menuAction())

    # --- the dialog -----------------------------------------------------------------------

    def open(self, target: str | None = None) -> LibraryDialog:
        """Show the library (scanning what changed since the last scan); with ``target``,
        that file is chosen as the target, and its drafts are looked for."""
        if self.dialog is None:
            dialog = LibraryDialog(self._dialog_parent)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            dialog.scan_requested.connect(self.scan)
            dialog.cancel_requested.connect(self._cancel_scan)
            dialog.folder_added.connect(self.add_folder)
            dialog.folder_removed.connect(self.remove_folder)
            dialog.target_selected.connect(self.find_drafts)
            dialog.pair_chosen.connect(self.use_pair)
            dialog.check_requested.connect(self.check_pair)
            dialog.chat_format_chosen.connect(self.choose_chat_format)
            dialog.make_draft_requested.connect(self.make_draft)
            dialog.make_draft_cancelled.connect(self.cancel_draft)
            dialog.finished.connect(lambda _result: self._forget(dialog))
            self.dialog = dialog
        self.dialog.set_folders(self._settings().library_folders)
        self.dialog.set_chat_formats(self.client.chat_format_names(), self._settings().chat_formats)
        if target and target not in self._extra_paths:
            self._extra_paths.append(target)
        self._pending_target = target
        self.dialog.open()
        self.scan()
        return self.dialog

    def scan(self) -> None:
        if self._scan is not None:
            return
        settings = self._settings()
        folders, extra = list(settings.library_folders), list(self._extra_paths)
        in_use = [p for pair in ((settings.target_path, settings.draft_path), *settings.recent_pairs)
                  for p in pair if p]

        def work(job: BackgroundJob) -> ScanResult:
            result = scan_library(library_locations(folders, include_made=True), progress=job.progressed.emit,
                                  cancel=job.cancel, in_use=in_use)
            known = {e.path for e in result.entries}
            chosen = [read_entry(Path(p), shown_name(p), FOLDER) for p in extra if p not in known]
            return replace(result, entries=result.entries + chosen)

        self._scan = job = _job(work, self)
        job.progressed.connect(self._show_progress)
        job.done.connect(self._scanned)
        if self.dialog is not None:
            self.dialog.show_scanning()
        job.start()

    def add_folder(self, folder: str) -> None:
        settings = self._settings()
        if folder not in settings.library_folders and len(settings.library_folders) < MAX_FOLDERS:
            self._apply(settings.replace(library_folders=settings.library_folders + (folder,)))
        self._folders_changed()

    def remove_folder(self, folder: str) -> None:
        settings = self._settings()
        self._apply(settings.replace(library_folders=tuple(f for f in settings.library_folders if f != folder)))
        self._folders_changed()

    def _folders_changed(self) -> None:
        if self.dialog is not None:
            self.dialog.set_folders(self._settings().library_folders)
        self._restart_scan()

    def find_drafts(self, target_path: str) -> None:
        result = self.result
        if result is None:
            return
        entries = result.entries
        target = next((e for e in entries if e.path == target_path), None)
        if target is None:
            return
        if self._drafts is not None:
            self._drafts.cancel.set()  # its answer is for a target no longer chosen; the dialog drops it
        settings = self._settings()

        def work(job: BackgroundJob) -> tuple:
            candidates = find_drafts(target, entries)
            # Each usable draft's memory plan beside the target (headers only; one NVML read)
            plans = memory_plans(target_path, [c.entry.path for c in candidates if c.compatible][:PLANNED_MOST],
                                 settings)
            return target_path, candidates, plans

        self._drafts = job = _job(work, self)
        job.done.connect(self._drafts_found)
        job.start()

    def make_draft(self, target: str) -> None:
        """"Make a draft from this model": written off the GUI thread, then the pair loads."""
        if self.draft_task is not None:
            return
        self.draft_task = task = DraftTask(target, parent=self)
        task.planned.connect(self._draft_planned)
        task.progressed.connect(self._draft_progressed)
        task.done.connect(lambda path: self._draft_made(target, path))
        task.failed.connect(lambda message: self._draft_ended(message))
        task.cancelled.connect(lambda: self._draft_ended("Making the draft was cancelled; nothing was kept."))
        if self.dialog is not None:
            self.dialog.show_making_draft(f"Making a draft from {shown_name(target)}…")
        task.start()

    def cancel_draft(self) -> None:
        if self.draft_task is not None:
            self.draft_task.cancel()

    def _draft_planned(self, text: str) -> None:
        if self.dialog is not None:
            self.dialog.show_making_draft(text + ".")

    def _draft_progressed(self, fraction: float, stage: str) -> None:
        if self.dialog is not None:
            self.dialog.show_draft_progress(fraction, stage)

    def _draft_made(self, target: str, draft: str) -> None:
        self._draft_ended(f"Made {shown_name(draft)} from {shown_name(target)}; loading the pair.")
        self.use_pair(target, draft)
        self.check_pair(target, draft)  # once loaded: the speed-up the made draft gives, measured
        self._restart_scan()  # the new draft joins the list, offered first for its target

    def _draft_ended(self, text: str) -> None:
        self.draft_task = None
        if self.dialog is not None:
            self.dialog.show_draft_finished(text)
        else:
            self._say(text, 8000)

    def use_pair(self, target: str, draft: str) -> None:
        """One click: the pair in the settings (a reload follows), remembered among the recent."""
        settings = self._settings().replace(target_path=target, draft_path=draft, drafter=DrafterKind.MODEL.value)
        self._apply(with_recent_pair(settings, target, draft))
        self._say(f"Loading {shown_name(target)} with the draft {shown_name(draft)}", 5000)
        self.pair_set.emit(target, draft)
        if self.dialog is not None:
            self.dialog.offer_check(target, draft)

    def choose_chat_format(self, path: str, name: str) -> None:
        """The chat format of one file, remembered (the target in use reloads with it)."""
        self._apply(with_chat_format(self._settings(), path, name))
        self._say(f"Chat format of {shown_name(path)}: "
                  + (f"llama.cpp's '{name}'" if name else "the file's own template"), 5000)

    def remember_pair(self, settings: Settings) -> None:
        """After a change of models (Settings, a dropped file): the new pair goes first
        among the recent pairs. Other changes leave them as they are."""
        pair = (settings.target_path, settings.draft_path)
        changed, self._last_pair = pair != self._last_pair, pair
        if (not changed or needs(settings.drafter) is not Needs.DRAFT_FILE or not all(pair)
                or settings.recent_pairs[:1] == (pair,)):
            return
        self._apply(with_recent_pair(settings, *pair))

    def check_pair(self, target: str, draft: str) -> None:
        """The self-test on the pair, once it has loaded."""
        if self.client.loading:
            self._say("Check speculation runs when the pair has loaded…", 0)
            self.client.loaded.connect(lambda _info: self._check_speculation(),
                                       Qt.ConnectionType.SingleShotConnection)
        else:
            self._check_speculation()

    def shutdown(self) -> None:
        for job in (self._scan, self._drafts):
            if job is not None:
                job.cancel.set()
                job.wait(2.0)
        if self.draft_task is not None:
            self.draft_task.cancel()  # the child is killed, its partial file removed
            self.draft_task.wait(10.0)

    # --- recent pairs ---------------------------------------------------------------------

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        pairs = self._settings().recent_pairs
        if not pairs:
            self.recent_menu.addAction("No pairs yet").setEnabled(False)
        for target, draft in pairs:
            action = self.recent_menu.addAction(f"{shown_name(target)}  +  {shown_name(draft)}")
            action.setToolTip(f"{target}\n{draft}")
            action.triggered.connect(lambda _checked=False, t=target, d=draft: self.use_pair(t, d))

    # --- answers --------------------------------------------------------------------------

    def _show_progress(self, done: int, total: int, name: str) -> None:
        if self.dialog is not None:
            self.dialog.show_progress(done, total, name)

    def _scanned(self, result: ScanResult | str) -> None:
        self._scan = None
        if isinstance(result, str):
            self._say(result, 8000)
            return
        self.result = result
        if self.dialog is not None:
            self.dialog.show_result(result)
            if self._pending_target:
                self.dialog.select_target(self._pending_target)
                self._pending_target = None

    def _drafts_found(self, answer: tuple | str) -> None:
        if isinstance(answer, str):
            self._say(answer, 8000)
            return
        target_path, candidates, plans = answer
        if self.dialog is not None:
            self.dialog.show_drafts(target_path, candidates, plans)

    # --- internals ------------------------------------------------------------------------

    def _cancel_scan(self) -> None:
        if self._scan is not None:
            self._scan.cancel.set()

    def _restart_scan(self) -> None:
        if self._scan is not None:
            self._scan.cancel.set()
            self._scan.done.connect(lambda _result: self.scan(), Qt.ConnectionType.SingleShotConnection)
        else:
            self.scan()

    def _forget(self, dialog: LibraryDialog) -> None:
        if self.dialog is dialog:
            self.dialog = None
        self._cancel_scan()
