"""The models as the window shows them: loading (banner, status line), loaded, failed,
and the crash-loop guard that refuses to load again what the last start died on.

``ModelLoading`` follows the engine client (``app.bridge.client.Engine``)'s load signals and asks it for loads; the
window says when (at start, after settings change) through ``load``.
"""

from __future__ import annotations

from typing import Callable, TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QLabel

from app.drafter_kinds import loaded_words
from app.engine.types import SPECULATION_OFF
from app.session.chat_types import LoadInfo
from app.session.config import ModelSpec
from app.storage import load_marker
from app.storage.settings import Settings
from app.ui.composer import Composer
from app.ui.load_banner import LoadBanner
from app.ui.notices import ERROR, INFO, WARNING, NoticeArea
from app.ui.stats_panel import StatsPanel

if TYPE_CHECKING:
    from app.bridge.client import Engine

APP_NAME = "Tandem"
LOAD_NOTICE_KEY, DRAFT_NOTICE_KEY, FORMAT_NOTICE_KEY = "load", "draft", "chat-format"


class ModelLoading(QObject):
    def __init__(self, client: Engine, *, banner: LoadBanner, model_label: QLabel, stats: StatsPanel,
                 composer: Composer, notices: NoticeArea, settings: Callable[[], Settings],
                 say: Callable[[str, int], None], set_title: Callable[[str], None],
                 open_settings: Callable[[], object], parent: QObject | None = None) -> None:
        """``settings()`` names the models to load; ``say(text, ms)`` shows a passing line;
        ``set_title`` names the window after the target; ``open_settings`` is offered when
        a load is refused."""
        super().__init__(parent)
        self.client = client
        self.banner = banner
        self.model_label = model_label
        self.stats = stats
        self.composer = composer
        self.notices = notices
        self._settings = settings
        self._say = say
        self._set_title = set_title
        self._open_settings = open_settings
        client.load_progress.connect(self._on_load_progress)
        client.loaded.connect(self._on_loaded)
        client.load_failed.connect(self._on_load_failed)

    def refuse_crashed_load(self, death: str = "") -> bool:
        """No crash loop: if the last start (or the engine, ``death`` saying how) died while
        loading these very models, do not load them again; say so and open the settings
        (OK there, or other files, retries)."""
        settings = self._settings()
        crashed = load_marker.crashed_load()
        if crashed is None or not crashed.matches(settings.target_path, settings.draft_path):
            return False
        self._show_unloaded()
        what = (f"{death} while loading {crashed.describe()}" if death else
                f"Tandem closed while loading {crashed.describe()} (started {crashed.started})")
        self.notices.show_notice(
            LOAD_NOTICE_KEY, f"{what}, so they were not loaded again: llama.cpp may have crashed on them. Choose "
                             "other files in Settings, or press OK there to try these again.", ERROR)
        QTimer.singleShot(0, self._open_settings)
        return True

    def load(self, force: bool = False) -> None:
        """Load what the settings name (``force``: even if it is what is loaded)."""
        settings = self._settings()
        spec = ModelSpec.from_settings(settings)
        if force:
            self.client.load(spec)
        elif not self.client.ensure_loaded(spec):
            return
        self.notices.clear(LOAD_NOTICE_KEY)
        self.model_label.setText("Loading models…")
        self.banner.show_progress("Loading models", -1)
        self.banner.show()
        self.stats.show_models(None, "loading…")
        self.stats.show_speculation(settings.speculation, None)

    def _on_load_progress(self, stage: str, fraction: float) -> None:
        self.banner.show_progress(stage, fraction)
        self.banner.show()

    def _on_loaded(self, info: LoadInfo) -> None:
        self.banner.hide()
        self.composer.set_ready(True)
        self.model_label.setText(f"{info.target_name} · {loaded_words(info.drafter, info.draft_name)} · {info.compute}")
        self._set_title(f"{APP_NAME} — {info.target_name}")
        self.stats.show_models(info)
        self.stats.show_speculation(self._settings().speculation, info)
        if info.failed_rule:
            self.notices.show_notice(
                DRAFT_NOTICE_KEY, f"{info.note} (failed rule: {info.failed_rule}). "
                                  "Chatting continues without speculation.", WARNING)
        elif not info.speculation_available and info.note and info.note != SPECULATION_OFF:
            self.notices.show_notice(DRAFT_NOTICE_KEY, f"Speculation unavailable: {info.note}.", INFO)
        else:
            self.notices.clear(DRAFT_NOTICE_KEY)
        if info.chat_format_notice:
            self.notices.show_notice(FORMAT_NOTICE_KEY, f"{info.target_name}: {info.chat_format_notice}.", INFO)
        else:
            self.notices.clear(FORMAT_NOTICE_KEY)
        self._say("Models loaded", 3000)

    def _on_load_failed(self, message: str) -> None:
        self._show_unloaded()
        self.notices.show_notice(LOAD_NOTICE_KEY, f"Could not load the models: {message} "
                                 "Choose other files in Settings (Ctrl+,) or drop a .gguf here.", ERROR)

    def show_engine_gone(self) -> None:
        """The engine died: nothing is loaded until it is restarted."""
        self._show_unloaded()
        self.model_label.setText("Engine stopped")

    def _show_unloaded(self) -> None:
        self.banner.hide()
        self.model_label.setText("No model loaded")
        self.stats.show_models(None, "not loaded")
        self.composer.set_ready(False)
