"""Help → Open log folder and About: where the log is, the versions and the licences."""

from __future__ import annotations

from PySide6.QtCore import QObject, QUrl, Slot
from PySide6.QtGui import QDesktopServices

from app import __version__
from app.logs import log_file, setup_logging

from bridge.fakes import ScriptedLoader, tokens
from .test_main_window import SETTINGS
from window_fixtures import wait_loaded


class UrlCatcher(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url)


def test_help_opens_the_log_folder_and_about_names_it(make_window, qtbot, tandem_home):
    window = make_window(SETTINGS, loader=ScriptedLoader(tokens("hi")))
    wait_loaded(qtbot, window)
    catcher = UrlCatcher()
    QDesktopServices.setUrlHandler("file", catcher, "open")  # Qt's own hook for where URLs go
    try:
        help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
        action = next(a for a in help_menu.actions() if a.text() == "Open &log folder")
        action.trigger()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [u.toLocalFile() for u in catcher.urls] == [str(tandem_home / "log")]

    window.show_about()
    text = window.last_about.text()
    assert f"Version {__version__}" in text and "llama-cpp-python 0.3" in text
    assert str(log_file()) in text and "LGPL" in text and "MIT" in text


def test_the_log_file_gets_warnings_and_rotates(tandem_home):
    import logging
    import logging.handlers

    path = setup_logging()
    assert path == tandem_home / "log" / "tandem.log"
    logging.getLogger("tandem.test").warning("something to keep")
    handler = next(h for h in logging.getLogger().handlers if isinstance(h, logging.handlers.RotatingFileHandler))
    handler.flush()
    assert "something to keep" in path.read_text(encoding="utf-8")
    assert handler.maxBytes > 0 and handler.backupCount >= 1
    for added in [h for h in logging.getLogger().handlers if getattr(h, "_tandem", False)]:
        logging.getLogger().removeHandler(added)
        added.close()
