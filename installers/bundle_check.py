"""``tandem-bundle-check``: is everything the app needs inside this bundle?

Built next to ``tandem`` by installers/tandem.spec (same _internal/ folder), so it
sees exactly what the app sees. ``--self-test`` proves that llama.cpp and the
engine work but never starts Qt; this checks the rest without opening a window:

- Qt starts on the platform plugin asked for (offscreen unless QT_QPA_PLATFORM says
  otherwise) and can decode PNG;
- the icon, token palette and style sheet load from ``app.resources``;
- llama.cpp's shared libraries load, from inside the bundle, its RPC backend among them;
- gguf, jinja2's sandbox, pynvml and huggingface_hub import, and the Hub picks load;
- every module of the ``app`` package imports.

Prints one line per check and exits 0 when all pass. Also runs from a checkout:
``python installers/bundle_check.py``.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

FROZEN = getattr(sys, "frozen", False)
BUNDLE_DIR = Path(getattr(sys, "_MEIPASS", "")).resolve() if FROZEN else None


def check_qt() -> str:
    from PySide6.QtGui import QImageReader
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([sys.argv[0]])
    formats = {bytes(f).decode() for f in QImageReader.supportedImageFormats()}
    assert "png" in formats, f"no PNG image format (have: {sorted(formats)})"
    return f"platform plugin '{app.platformName()}', image formats: {', '.join(sorted(formats))}"


def check_resources() -> str:
    from PySide6.QtWidgets import QApplication

    from app.ui import resources

    icon = resources.icon()
    sizes = sorted(s.width() for s in icon.availableSizes())
    assert not icon.isNull(), "the icon is empty"
    assert sizes == sorted(resources.ICON_SIZES), f"icon sizes {sizes}, expected {resources.ICON_SIZES}"
    for dark in (False, True):
        palette = resources.token_palette(dark)
        missing = [kind for kind in resources.TOKEN_KINDS if kind not in palette]
        assert not missing, f"palette ({'dark' if dark else 'light'}) lacks {missing}"
    sheet = resources.style_sheet()
    assert sheet.strip(), "the style sheet is empty"
    QApplication.instance().setStyleSheet(sheet)
    return f"icon {sizes[0]}..{sizes[-1]} px ({len(sizes)} sizes), light/dark palettes, style sheet"


def check_llama_cpp() -> str:
    import llama_cpp.llama_cpp as low_level

    from app.backends.llama.process_setup import system_info

    from app.backends.llama import rpc

    info = system_info()
    library = Path(low_level._lib._name).resolve()
    if FROZEN:
        assert BUNDLE_DIR in library.parents, f"libllama loaded from outside the bundle: {library}"
    # tandem worker and --rpc need llama.cpp's RPC backend (libggml-rpc, beside libllama).
    assert rpc.available(), "llama.cpp's RPC backend is not in the bundle (build with -DGGML_RPC=ON)"
    return f"{info['backend']} backend with RPC, llama-cpp-python {info['llama_cpp_python']}, {library.name}"


def check_libraries() -> str:
    import gguf
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download  # noqa: F401  (Get models…)

    from app.gpu.monitor import _import_pynvml
    from app.hub.picks import load_picks

    rendered = ImmutableSandboxedEnvironment().from_string("{{ who }}").render(who="ok")
    assert rendered == "ok", rendered
    assert hasattr(gguf, "GGUFReader")
    _import_pynvml()
    assert load_picks()[1], "no picks"  # app/resources/hub_picks.json is in the bundle
    return f"gguf, jinja2 {jinja2.__version__} (sandbox), pynvml, huggingface_hub, the Hub picks"


def check_app_modules() -> str:
    import importlib
    import pkgutil

    import app

    names = [info.name for info in pkgutil.walk_packages(app.__path__, "app.")
             if info.name != "app.__main__"]
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report every module, not the first
            failed.append(f"{name} ({type(exc).__name__}: {exc})")
    assert names, "found no app modules"
    assert not failed, "cannot import " + "; ".join(failed)
    return f"{len(names)} modules import"


CHECKS = [
    ("Qt", check_qt),
    ("resources", check_resources),
    ("llama.cpp", check_llama_cpp),
    ("libraries", check_libraries),
    ("app modules", check_app_modules),
]


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    where = f"bundle at {BUNDLE_DIR}" if FROZEN else f"source, Python {sys.version.split()[0]}"
    print(f"Tandem bundle check ({where})")
    failures = 0
    for label, check in CHECKS:
        try:
            print(f"  ok    {label:<12} {check()}")
        except Exception as exc:  # noqa: BLE001 - one line per failed check, then go on
            failures += 1
            print(f"  FAIL  {label:<12} {type(exc).__name__}: {exc}")
            if os.environ.get("TANDEM_DEBUG"):
                traceback.print_exc()
    print("Result: " + ("PASS" if not failures else f"FAIL ({failures} of {len(CHECKS)} checks)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
