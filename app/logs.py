"""Where Tandem writes what happened: a rotating log file in the user's log folder.

A window started from a menu has no terminal, so its warnings and errors (and
llama.cpp's) would go nowhere; the file keeps the last few megabytes of them.
Help → Open log folder and the About box point at it.
"""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

LOG_NAME = "tandem.log"
MAX_BYTES = 1_000_000
BACKUPS = 3
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_file() -> Path:
    from app.storage import paths

    return paths.log_dir() / LOG_NAME


FILE_ONLY = {"file_only": True}  # logging's ``extra=``: the record skips the terminal


class _TerminalFormatter(logging.Formatter):
    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        where = f" ({record.name})" if self.verbose else ""
        return f"tandem: {record.levelname.lower()}{where}: {record.getMessage()}"


def setup_logging(verbose: bool = False) -> Path | None:
    """Terminal: warnings (everything with ``verbose``); file: info and up. Returns the file, if any."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(getattr(h, "_tandem", False) for h in root.handlers):
        terminal = logging.StreamHandler()
        terminal.setLevel(logging.DEBUG if verbose else logging.WARNING)
        # One line a user can read ("tandem: warning: ..."); with -v, which logger said it.
        terminal.setFormatter(_TerminalFormatter(verbose))
        # Messages already printed to the user in their own words go to the file alone.
        terminal.addFilter(lambda r: not getattr(r, "file_only", False))
        if not verbose:  # llama.cpp's warnings are for the file; its errors also for the terminal
            terminal.addFilter(lambda r: not r.name.startswith("tandem.llama") or r.levelno >= logging.ERROR)
        terminal._tandem = True
        root.addHandler(terminal)
    # llama.cpp is chatty: its messages reach the file at WARNING unless asked for.
    logging.getLogger("tandem.llama").setLevel(logging.DEBUG if verbose else logging.WARNING)
    existing = next((h for h in root.handlers if isinstance(h, logging.handlers.RotatingFileHandler)
                     and getattr(h, "_tandem", False)), None)
    if existing is not None:
        return Path(existing.baseFilename)
    try:
        path = log_file()
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS,
                                                       encoding="utf-8")
    except OSError:
        return None  # a read-only or missing log folder must not stop the app
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler._tandem = True
    root.addHandler(handler)
    return path
