"""File → Get models…: the Hugging Face Hub in the window.

Searching, planning (each file's header read over the network, ``app.hub``) and
downloading run on plain threads and answer through queued signals, so the window never
waits on the network. A download can be cancelled and resumes where it stopped (from
the disk, so also after a restart); when it ends, Load puts the pair in the settings
(a reload follows) and among the recent pairs. Every failure is one line in the dialog.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

from app.drafter_kinds import DEFAULT as DEFAULT_DRAFTER
from app.errors import TandemError, one_line
from app.hub.files import HubFile, HubRepo, size_text
from app.hub.picks import Pick
from app.storage.settings import Settings
from app.ui.hub_dialog import GetModelsDialog, Listed, ListedRepo
from app.window.background_job import BackgroundJob

@dataclass(frozen=True)
class _Planned:
    target: object           # RemoteModel
    draft: object | None     # RemoteModel
    text: str
    can_download: bool
    here: tuple[str, str] | None  # (target path, draft path) when both are in the cache already


class HubController(QObject):
    def __init__(self, *, settings: Callable[[], Settings], apply: Callable[[Settings], None],
                 use_pair: Callable[[str, str], None], say: Callable[[str, int], None],
                 dialog_parent: QWidget) -> None:
        """``use_pair``: the library's (settings, recent pairs); ``apply``: for a target alone."""
        super().__init__(dialog_parent)
        self._settings = settings
        self._apply = apply
        self._use_pair = use_pair
        self._say = say
        self._dialog_parent = dialog_parent
        self.dialog: GetModelsDialog | None = None
        self._search: BackgroundJob | None = None
        self._plan: BackgroundJob | None = None
        self._download: BackgroundJob | None = None
        self.planned: _Planned | None = None
        self.downloaded: tuple[str, str] | None = None  # (target path, draft path '' : none)
        self.action = QAction("&Get models…", self)
        self.action.setShortcut("Ctrl+Shift+M")
        self.action.setToolTip("Find a model and a draft on the Hugging Face Hub, see whether they fit, "
                               "download them (Ctrl+Shift+M)")
        self.action.triggered.connect(lambda: self.open())
        self.actions = (self.action,)

    # --- the dialog -----------------------------------------------------------------------

    def open(self) -> GetModelsDialog:
        if self.dialog is None:
            dialog = GetModelsDialog(self._dialog_parent)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            dialog.search_requested.connect(self.search)
            dialog.chosen.connect(self.plan)
            dialog.download_requested.connect(self.download)
            dialog.cancel_requested.connect(self.cancel)
            dialog.load_requested.connect(self.load)
            dialog.finished.connect(lambda _result: self._forget(dialog))
            self.dialog = dialog
            self._show_picks()
        self.dialog.open()
        self.dialog.query.setFocus()
        return self.dialog

    def _show_picks(self) -> None:
        from app.hub.picks import picks_for

        if self.dialog is not None:
            self.dialog.show_results([self._listed_pick(p) for p in picks_for("")], [],
                                     "Tandem's picks, or search the Hub for a model by name.")

    @staticmethod
    def _listed_pick(pick: Pick) -> Listed:
        gpu = f"{pick.gpu_gb:g} GB GPU" if pick.gpu_gb else "a CPU will do"
        return Listed(pick.name, pick.target.quant, "", f"{gpu}; {pick.note}", pick)

    # --- search ---------------------------------------------------------------------------

    def search(self, text: str) -> None:
        if self.dialog is None:
            return
        if not text:
            self._show_picks()
            return
        if self._search is not None:
            self._search.cancel.set()  # its answer is dropped
        self.dialog.show_searching(text)

        def work(job: BackgroundJob):
            from app.hub.picks import picks_for
            from app.hub.search import search

            return picks_for(text), search(text)

        self._search = self._start(work, self._searched)

    def _searched(self, job: BackgroundJob, answer) -> None:
        if job is not self._search:
            return
        self._search = None
        if self.dialog is None:
            return
        if isinstance(answer, str):
            self.dialog.show_error(answer)
            return
        picks, results = answer
        repos = [ListedRepo(r.repo, f"{r.downloads:,} downloads" + (", gated" if r.gated else ""),
                            HubRepo(r.repo, "", r.revision),
                            tuple(Listed(f.filename, f.quant, size_text(f.size) if f.size else "",
                                         f"{f.parts} parts" if f.parts > 1 else "",
                                         HubFile(r.repo, f.filename, r.revision)) for f in r.files))
                 for r in results]
        note = "" if results else f"No GGUF repository on the Hub matches “{self.dialog.query.text().strip()}”."
        self.dialog.show_results([self._listed_pick(p) for p in picks], repos, note)

    # --- plan -----------------------------------------------------------------------------

    def plan(self, choice) -> None:
        if self.dialog is None or self._download is not None:
            return
        shown = (choice.target.filename if isinstance(choice, Pick) else
                 f"{choice.repo}'s quantisations" if isinstance(choice, HubRepo) else choice.filename)
        self.planned = None
        self.dialog.show_planning(shown)
        settings = self._settings()

        def work(job: BackgroundJob) -> _Planned:
            return _plan(choice, settings)

        self._plan = self._start(work, self._planned)

    def _planned(self, job: BackgroundJob, answer) -> None:
        if job is not self._plan or self.dialog is None:
            return
        self._plan = None
        if isinstance(answer, str):
            self.dialog.show_plan(answer, False)
            return
        self.planned = answer
        self.downloaded = answer.here
        self.dialog.show_plan(answer.text, answer.can_download, already_here=answer.here is not None)

    # --- download -------------------------------------------------------------------------

    def download(self) -> None:
        if self.dialog is None or self.planned is None or self._download is not None:
            return
        planned = self.planned
        self.downloaded = None

        def work(job: BackgroundJob):
            from app.hub.download import pull

            def progress(what: str, done: float, total: float) -> bool:
                job.progressed.emit(what, float(done), float(total))
                return not job.cancel.is_set()

            pulled = [pull(remote.file, progress) for remote in (planned.target, planned.draft) if remote is not None]
            return pulled

        self.dialog.show_progress("starting the download", 0, 0)
        self._download = self._start(work, self._downloaded)
        self._download.progressed.connect(self._progressed)

    def _progressed(self, what: str, done: float, total: float) -> None:
        if self.dialog is not None and self._download is not None:
            self.dialog.show_progress(what, done, total)

    def cancel(self) -> None:
        if self._download is not None:
            self._download.cancel.set()

    def _downloaded(self, job: BackgroundJob, answer) -> None:
        if job is not self._download:
            return
        self._download = None
        if isinstance(answer, str):
            if self.dialog is not None:
                self.dialog.show_download_failed(answer)
            else:
                self._say(answer, 10000)
            return
        target = str(answer[0].path)
        draft = str(answer[1].path) if len(answer) > 1 else ""
        self.downloaded = (target, draft)
        text = "Downloaded and verified against the Hub's sha256: " + ", ".join(
            f"{p.file.repo}/{p.file.filename}" for p in answer) + ". Load puts them in use."
        if self.dialog is not None:
            self.dialog.show_downloaded(text)
        else:
            self._say(text, 10000)

    def load(self) -> None:
        """The downloaded pair in the settings (a reload follows), remembered among the recent."""
        if self.downloaded is None:
            return
        target, draft = self.downloaded
        if draft:
            self._use_pair(target, draft)
        else:  # a target alone (its own MTP head, or no draft found): no recent pair to keep
            self._apply(self._settings().replace(target_path=target, draft_path="", drafter=DEFAULT_DRAFTER.value))
            self._say(f"Loading {Path(target).name}", 5000)
        if self.dialog is not None:
            self.dialog.accept()

    # --- plumbing -------------------------------------------------------------------------

    def _start(self, work, answer) -> BackgroundJob:
        job = BackgroundJob(work, self, name="tandem-hub",
                            failure=lambda exc: str(exc) if isinstance(exc, TandemError) else one_line(exc))
        job.done.connect(lambda result, job=job: answer(job, result), Qt.ConnectionType.QueuedConnection)
        job.start()
        return job

    def _forget(self, dialog: GetModelsDialog) -> None:
        if self.dialog is dialog:
            self.dialog = None

    def shutdown(self) -> None:
        for job in (self._search, self._plan, self._download):
            if job is not None:
                job.cancel.set()
                job.wait(5.0)


def _plan(choice, settings: Settings) -> _Planned:
    """Both headers read, the pair judged and planned at the settings' context and GPU
    layers, the download set against the free disk (runs off the UI thread)."""
    from app.library.locations import hub_file
    from app.session.model_downloads import plan_choice, plan_repo

    options = dict(n_ctx=settings.n_ctx, target_gpu_layers=settings.target_gpu_layers,
                   draft_gpu_layers=settings.draft_gpu_layers, flash_attention=settings.flash_attention)
    if isinstance(choice, HubRepo):  # a repository: its best quantisation for this machine
        pulled = plan_repo(choice, **options)
    else:
        target, draft = (choice.target, choice.draft) if isinstance(choice, Pick) else (choice, None)
        pulled = plan_choice(target, draft, find=not isinstance(choice, Pick), **options)
    here_target = hub_file(f"{pulled.target.file.repo}/{pulled.target.file.filename}")
    here_draft = (hub_file(f"{pulled.draft.file.repo}/{pulled.draft.file.filename}")
                  if pulled.draft is not None else None)
    here = None
    if here_target is not None and (pulled.draft is None or here_draft is not None):
        here = (str(here_target), str(here_draft) if here_draft is not None else "")
    lines = pulled.lines(settings.n_ctx)
    if here is not None:
        lines.append("Already downloaded: Load puts it in use.")
    return _Planned(pulled.target, pulled.draft, "\n".join(lines), pulled.disk_ok, here)
