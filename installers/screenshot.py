#!/usr/bin/env python3
"""Render the README screenshot: the real window, offscreen, mid-conversation on the demo pair.

    .venv/bin/python installers/screenshot.py [--out docs/screenshot.png]

The demo models come from the usual cache (provisioned on first use); everything
the window writes (settings, geometry) goes to a throw-away TANDEM_HOME.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Mid-conversation, with a reply that has a code block and a list: the chat's Markdown
# drawn as it streams, each token in its kind's colour.
PROMPTS = ("Give me three tips for staying focused while studying.",
           "Write a Python function that reverses a string, then list two ways to test it.")
NEXT_PROMPT = "Can you make it work for lists too?"
SIZE = (1280, 800)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    parser.add_argument("--max-tokens", type=int, default=220)
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from app.models.demo import demo_pair

    pair = demo_pair()  # the shared cache, before TANDEM_HOME moves every path
    os.environ["TANDEM_HOME"] = tempfile.mkdtemp(prefix="tandem-screenshot-")

    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    from app.storage.settings import LoadedSettings, Settings
    from app.window.main_window import MainWindow
    from app.ui.resources import icon, style_sheet

    app = QApplication(sys.argv[:1])
    app.setApplicationName("Tandem")
    app.setWindowIcon(icon())
    app.setStyleSheet(style_sheet())
    settings = Settings(target_path=str(pair.target), draft_path=str(pair.draft), temperature=0.0,
                        draft_max=5, max_tokens=args.max_tokens, n_ctx=2048)
    window = MainWindow(LoadedSettings(settings, None))
    window.resize(*SIZE)
    window.show()

    def wait(condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"screenshot: timed out waiting for {what}")
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)

    wait(lambda: window.client.info is not None, 120, "the models to load")
    for prompt in PROMPTS:
        reply = window.send(prompt)
        wait(lambda: reply.status != "streaming", 900, "the reply")  # a busy machine is slow
    window.composer.set_text(NEXT_PROMPT)  # mid-conversation: the next question is being typed
    for _ in range(5):
        app.processEvents()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not window.grab().save(str(args.out)):
        raise SystemExit(f"screenshot: could not write {args.out}")
    print(f"Saved {args.out} ({reply.stats.tokens} tokens, acceptance {reply.stats.acceptance:.2f})")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
