"""Load the app's icon, token palette and style sheet from ``app.resources``.

Everything goes through ``importlib.resources`` (bytes, never file paths), so
the same code works from a checkout, a wheel or a PyInstaller bundle.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files

from PySide6.QtGui import QIcon, QPixmap

from app.engine.types import TokenKind

ICON_SIZES = (16, 32, 48, 64, 128, 256, 512)
TOKEN_KINDS = tuple(kind.value for kind in TokenKind)  # the palette has a colour for each

_PACKAGE = "app.resources"


def _read_bytes(name: str) -> bytes:
    return files(_PACKAGE).joinpath(name).read_bytes()


def icon() -> QIcon:
    """The app icon with a pixmap for every size in ICON_SIZES."""
    result = QIcon()
    for size in ICON_SIZES:
        pixmap = QPixmap()
        if pixmap.loadFromData(_read_bytes(f"icons/tandem-{size}.png"), "PNG"):
            result.addPixmap(pixmap)
    return result


@cache
def _palettes() -> dict[str, dict[str, str]]:
    return json.loads(_read_bytes("palette.json").decode("utf-8"))


def token_palette(dark: bool) -> dict[str, str]:
    """Colours (``#rrggbb``) for each of TOKEN_KINDS plus the theme's ``background``.

    Colour is never the only cue: the chat view also underlines corrected tokens.
    """
    return dict(_palettes()["dark" if dark else "light"])


def style_sheet() -> str:
    return _read_bytes("style.qss").decode("utf-8")
