"""Making a draft from a target, for the window: the plan, the writing and the check run
on a plain thread (``backends/draft_maker.py``), and answer through queued signals.

``planned`` carries the one line saying the disk space it needs (before any byte is
written), ``progressed`` the fraction and stage, ``done`` the made file's path, or a
one-line failure (``failed``), or ``cancelled``. ``cancel()`` stops it: the child is
killed and its partial file removed.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from app.errors import TandemError
from app.window.thread_task import ThreadTask

log = logging.getLogger(__name__)


class DraftTask(ThreadTask):
    planned = Signal(str)           # "... needs up to N MB of disk space in FOLDER"
    progressed = Signal(float, str)
    done = Signal(str)              # the made draft's path
    failed = Signal(str)            # one line
    cancelled = Signal()
    thread_name = "tandem-make-draft"

    def __init__(self, target: str, variant: str | None = None, layers: int | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.target = target
        self._variant = variant
        self._layers = layers

    def _run(self) -> None:
        from app.session.drafting import DraftCancelled, find_made, make_draft, plan_draft, space_line

        try:
            plan = plan_draft(self.target, self._variant, self._layers)
            layers = plan.keep_layers if plan.keep_layers < plan.n_layer else None
            made = find_made(plan.source, plan.variant, layers)
            if made is not None:
                self.done.emit(made.draft)
                return
            self.planned.emit(space_line(plan))
            result = make_draft(plan, progress=lambda fraction, stage: self.progressed.emit(fraction, stage),
                                cancel=self._cancel)
        except DraftCancelled:
            self.cancelled.emit()
        except TandemError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # noqa: BLE001 - one line for the window, the rest in the log
            log.exception("making a draft failed")
            self.failed.emit(f"Could not make a draft: {exc}")
        else:
            self.done.emit(str(result.path))
