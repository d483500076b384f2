"""Render app/resources/icon.svg to the PNG sizes desktops ask for.

Run once after editing the SVG and commit the output:

    .venv/bin/python installers/render_icons.py

Qt's own SVG renderer is used so no extra tool (Inkscape, rsvg) is needed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

ICON_SIZES = (16, 32, 48, 64, 128, 256, 512)
RESOURCES = Path(__file__).resolve().parent.parent / "app" / "resources"


def render(svg: Path, out_dir: Path, sizes: tuple[int, ...] = ICON_SIZES) -> list[Path]:
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"not a valid SVG: {svg}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        path = out_dir / f"tandem-{size}.png"
        if not image.save(str(path), "PNG"):
            raise SystemExit(f"could not write {path}")
        written.append(path)
    return written


def main() -> None:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (keeps Qt alive)
    for path in render(RESOURCES / "icon.svg", RESOURCES / "icons"):
        print(path.relative_to(RESOURCES.parent.parent), path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
