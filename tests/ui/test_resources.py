from __future__ import annotations

import re
import tomllib
from glob import glob
from importlib.resources import files
from pathlib import Path

import pytest
from PySide6.QtCore import QSize, qInstallMessageHandler
from PySide6.QtWidgets import QPushButton

from app.ui.resources import ICON_SIZES, TOKEN_KINDS, icon, style_sheet, token_palette

ROOT = Path(__file__).resolve().parents[2]
SPECULATIVE_KINDS = ("accepted", "corrected", "bonus")


def _relative_luminance(colour: str) -> float:
    def linear(channel: int) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2.x contrast ratio, 1..21."""
    high, low = sorted((_relative_luminance(a), _relative_luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_contrast_ratio_matches_known_values():
    assert contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast_ratio("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


def test_icon_has_every_size(qapp):
    sizes = icon().availableSizes()
    assert sorted(s.width() for s in sizes) == sorted(ICON_SIZES)
    assert all(QSize(n, n) in sizes for n in ICON_SIZES)


def test_svg_icon_ships_too():
    svg = files("app.resources").joinpath("icon.svg").read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<svg")


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_palette_has_every_kind_as_hex(dark):
    palette = token_palette(dark)
    assert set(TOKEN_KINDS) | {"background"} <= palette.keys()
    assert all(re.fullmatch(r"#[0-9a-f]{6}", palette[k]) for k in (*TOKEN_KINDS, "background"))


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
@pytest.mark.parametrize("kind", [*SPECULATIVE_KINDS, "plain"])
def test_token_colours_are_readable_on_the_theme_background(dark, kind):
    palette = token_palette(dark)
    assert contrast_ratio(palette[kind], palette["background"]) >= 4.5


def test_themes_use_the_documented_backgrounds():
    assert token_palette(dark=False)["background"] == "#ffffff"
    assert token_palette(dark=True)["background"] == "#1e1e1e"


def test_speculative_kinds_have_distinct_colours():
    for dark in (False, True):
        colours = [token_palette(dark)[k] for k in TOKEN_KINDS]
        assert len(set(colours)) == len(colours)


def test_palette_is_a_copy():
    token_palette(False)["accepted"] = "#000000"
    assert token_palette(False)["accepted"] != "#000000"


@pytest.fixture
def qt_messages():
    """Qt's own warnings (pytest-qt's qtlog misses the style sheet parser's here)."""
    messages: list[str] = []
    previous = qInstallMessageHandler(lambda _mode, _context, text: messages.append(text))
    yield messages
    qInstallMessageHandler(previous)


@pytest.mark.parametrize(
    ("sheet", "parses"), [(None, True), ("QPushButton { color: red", False)], ids=["ours", "broken"]
)
def test_style_sheet_parses(qtbot, qt_messages, sheet, parses):
    # The broken sheet proves the check can fail.
    button = QPushButton("Send")
    qtbot.addWidget(button)
    button.setStyleSheet(style_sheet() if sheet is None else sheet)
    button.show()
    button.ensurePolished()
    assert (not any("parse" in m for m in qt_messages)) is parses


def test_package_data_glob_ships_every_resource():
    # What the wheel (and so a bundle built from it) will contain, without building one.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["app"]
    shipped = {
        Path(p).resolve()
        for pattern in patterns
        for p in glob(str(ROOT / "app" / pattern), recursive=True)
    }
    resources = ROOT / "app" / "resources"
    wanted = {
        p.resolve()
        for p in resources.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".py"
    }
    assert wanted, "no resource files found"
    assert wanted <= shipped, sorted(str(p.relative_to(ROOT)) for p in wanted - shipped)
