"""The Help menu: check speculation on the loaded pair, open the log folder, About.

Its actions (``actions``) are made here; the window places them. The self-test runs
off the UI thread through the engine client (``app.bridge.client.Engine``) (``check_speculation``).
"""

from __future__ import annotations

from typing import Callable, TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import QMessageBox, QWidget

from app.ui.about import about_details
from app.ui.notices import INFO, NoticeArea

if TYPE_CHECKING:
    from app.bridge.client import Engine


class HelpController(QObject):
    def __init__(self, client: Engine, notices: NoticeArea, *, say: Callable[[str, int], None],
                 clear_said: Callable[[], None], dialog_parent: QWidget) -> None:
        """``say(text, ms)`` shows a passing line (0: until ``clear_said()``); boxes open
        over ``dialog_parent``, which also owns this."""
        super().__init__(dialog_parent)
        self.client = client
        self.notices = notices
        self._say = say
        self._clear_said = clear_said
        self._dialog_parent = dialog_parent
        self.last_check = None   # the last self-test report (or message), for a look afterwards
        self.last_about: QMessageBox | None = None
        self.check_action = QAction("&Check speculation", self)
        self.check_action.setToolTip("Generate 64 tokens with and without speculation and compare")
        self.check_action.triggered.connect(self.check_speculation)
        self.log_folder_action = QAction("Open &log folder", self)
        self.log_folder_action.setToolTip("Show the folder with Tandem's log files")
        self.log_folder_action.triggered.connect(self.open_log_folder)
        self.about_action = QAction("&About Tandem", self)
        self.about_action.triggered.connect(self.show_about)
        self.actions = (self.check_action, self.log_folder_action, self.about_action)

    def check_speculation(self) -> None:
        """Help → Check speculation: the self-test on the loaded pair, off the UI thread."""
        if self.client.busy or self.client.loading:
            self.notices.show_notice("check", "Wait for the current reply or load to finish first.", INFO)
            return
        self.check_action.setEnabled(False)
        self._say("Checking speculation (64 tokens with and without a draft)…", 0)
        self.client.checked.connect(self._show_check_result, Qt.ConnectionType.SingleShotConnection)
        self.client.check_speculation()

    def _show_check_result(self, report) -> None:
        self.check_action.setEnabled(True)
        self._clear_said()
        box = QMessageBox(self._dialog_parent)
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
        from app.logs import log_file

        box = QMessageBox(self._dialog_parent)
        box.setWindowTitle("About Tandem")
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText("Tandem — chat with local GGUF models, sped up losslessly by a draft model.\n\n"
                    "The reply is exactly what the target model alone would write; colours show "
                    "which tokens the draft guessed right.\n\n" + about_details(log_file()))
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.last_about = box
        box.open()

    def open_log_folder(self) -> None:
        from app.logs import log_file

        QDesktopServices.openUrl(QUrl.fromLocalFile(str(log_file().parent)))
