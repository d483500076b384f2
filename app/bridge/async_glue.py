"""All asyncio <-> Qt glue lives here (qasync).

The app runs one event loop: Qt's, with qasync's ``QEventLoop`` as asyncio's loop,
so a coroutine can await a thread-pool job without blocking the window. Async
slots stay a few lines and call plain, tested functions; the tasks they start are
kept referenced until done, so the garbage collector cannot cancel them half-way.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable

import qasync
from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QApplication

from app.errors import one_line


def run_app(app: QApplication) -> int:
    """Run ``app`` under qasync until its last window closes; returns the exit code.

    The window may close before this coroutine first runs (the models load while the
    window builds, so a window closed as soon as it is loaded closes in the loop's first
    turn). Qt's own quit on the last window would then stop the loop under a future that
    never completes; so the close is heard from before the loop starts, and this
    coroutine, not Qt, ends the loop."""
    closed_early: list[bool] = []
    app.setQuitOnLastWindowClosed(False)
    app.lastWindowClosed.connect(lambda: closed_early.append(True))

    async def until_last_window_closed() -> int:
        if closed_early:
            return 0
        closed = asyncio.get_running_loop().create_future()
        app.lastWindowClosed.connect(lambda: closed.done() or closed.set_result(0))
        return await closed

    try:
        return qasync.run(until_last_window_closed())
    except asyncio.CancelledError:
        return 0


async def off_thread(function: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking function in the loop's thread pool."""
    return await asyncio.get_event_loop().run_in_executor(None, function, *args)


def check_pair_blocking(target: str, draft: str) -> tuple[bool, str | None, str]:
    """(ok, failed rule, reason) from the two files' metadata and their trial loads
    (``app.session.pair_check``; each trial in a child process)."""
    from app.session.pair_check import check_pair_blocking as check

    return check(target, draft)


class PairChecker(QObject):
    """Answers "can this draft speculate for that target?" without blocking the window.

    ``checked(target, draft, ok, rule, reason)`` arrives on the UI thread; a
    question asked again before the answer came simply gets answered twice.
    """

    checked = Signal(str, str, bool, object, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._tasks: set[asyncio.Task] = set()  # held until done: the loop keeps only weak references

    @Slot(str, str)
    def check(self, target: str, draft: str) -> asyncio.Task:
        task = asyncio.ensure_future(self._check(target, draft))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _check(self, target: str, draft: str) -> None:
        try:
            ok, rule, reason = await off_thread(check_pair_blocking, target, draft)
        except Exception as exc:  # noqa: BLE001 — a check must never take the window down
            ok, rule, reason = False, "file", one_line(exc)
        self.checked.emit(target, draft, ok, rule, reason)


class MemoryPlanner(QObject):
    """Answers "will this pair fit, and how is it split?" (``app.session.fit.plan_line``)
    without blocking the window: ``planned(key, line)`` on the UI thread, ``key`` being
    what the asker passed, so that an answer to an older question can be told apart.

    A daemon thread per question, not the event loop's pool: the first-run screen asks
    before any coroutine runs, and a plan reads only headers and NVML (milliseconds to a
    second); a signal emitted from the thread is queued to the window's."""

    planned = Signal(object, str)

    def plan(self, key: object, target: str, draft: str, n_ctx: int, target_layers: object = "auto",
             draft_layers: object = "auto", flash_attention: str = "auto") -> threading.Thread:
        thread = threading.Thread(target=self._plan, name="memory-plan", daemon=True,
                                  args=(key, target, draft, n_ctx, target_layers, draft_layers, flash_attention))
        thread.start()
        return thread

    def _plan(self, key, target, draft, n_ctx, target_layers, draft_layers, flash_attention) -> None:
        from app.session.fit import plan_line

        try:
            line = plan_line(target, draft, n_ctx=n_ctx, target_gpu_layers=target_layers,
                             draft_gpu_layers=draft_layers, flash_attention=flash_attention)
        except Exception as exc:  # noqa: BLE001 - a plan must never take the window down
            line = f"Memory: not planned ({one_line(exc)})"
        try:
            self.planned.emit(key, line)
        except RuntimeError:  # the asker (and this object) went while the plan was read
            pass
