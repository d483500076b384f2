"""File → Get models… in the real window, against a local Hub serving the demo files:
search, plan from the headers, download with progress, cancel, download again (it
resumes), load the pair into the real engine. With the Hub down: one line, no dialog."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication, QMessageBox

from hub.conftest import DEMO_REPO, DRAFT, TARGET, hub  # noqa: F401  (the local Hub fixture)
from window_fixtures import LOAD_TIMEOUT_MS, demo_settings, wait_loaded

TIMEOUT_MS = 120_000


def _file_item(dialog, name):
    for i in range(dialog.results.topLevelItemCount()):
        top = dialog.results.topLevelItem(i)
        for j in range(top.childCount()):
            if top.child(j).text(0) == name:
                return top.child(j)
    return None


def test_search_plan_download_cancel_resume_and_load(make_window, qtbot, demo_models, hub):
    window = make_window(demo_settings(demo_models))
    wait_loaded(qtbot, window)
    controller = window.steering.hub
    assert controller.action in window.menuBar().actions()[0].menu().actions()
    dialog = controller.open()
    assert dialog.results.topLevelItemCount() == 1  # Tandem's picks, before any network

    dialog.query.setText("smollm")
    dialog.search_button.click()
    qtbot.waitUntil(lambda: _file_item(dialog, TARGET) is not None, timeout=TIMEOUT_MS)
    assert "Q4_1" in [_file_item(dialog, DRAFT).text(1)]

    # A repository chosen whole: its best quantisation for this machine (the F32 is a float).
    repo_item = next(dialog.results.topLevelItem(i) for i in range(dialog.results.topLevelItemCount())
                     if dialog.results.topLevelItem(i).text(0) == DEMO_REPO)
    dialog.results.setCurrentItem(repo_item)
    qtbot.waitUntil(lambda: dialog.download_button.isEnabled(), timeout=TIMEOUT_MS)
    assert f"Target: {DEMO_REPO}/{DRAFT}" in dialog.plan.text()

    dialog.results.setCurrentItem(_file_item(dialog, TARGET))
    qtbot.waitUntil(lambda: dialog.download_button.isEnabled(), timeout=TIMEOUT_MS)
    plan = dialog.plan.text()
    assert f"Target: {DEMO_REPO}/{TARGET}" in plan
    assert f"Draft: {DEMO_REPO}/{DRAFT}" in plan and "token for token" in plan  # found on the Hub
    assert "Fits: " in plan and "Download: 0.64 GB" in plan

    seen = []
    dialog.download_button.click()
    qtbot.waitUntil(lambda: dialog.progress.isVisible() and dialog.progress.value() > 0, timeout=TIMEOUT_MS)
    seen.append(dialog.progress.format())
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: controller._download is None, timeout=TIMEOUT_MS)
    assert "cancelled" in dialog.status.text() and dialog.download_button.isEnabled()
    assert not dialog.load_button.isEnabled()
    assert seen[0].startswith("downloading ")

    dialog.download_button.click()
    qtbot.waitUntil(lambda: dialog.load_button.isEnabled(), timeout=TIMEOUT_MS)
    assert "verified" in dialog.status.text()
    target_spec = hub.file(DEMO_REPO, TARGET)
    assert any(r.startswith("bytes=") and not r.startswith("bytes=0-") for r in target_spec.ranges)  # resumed

    dialog.load_button.click()
    qtbot.waitUntil(lambda: window.settings.target_path.endswith(TARGET) and
                    window.client.info is not None and not window.client.loading, timeout=LOAD_TIMEOUT_MS)
    assert "/snapshots/" in window.settings.target_path and window.settings.draft_path.endswith(DRAFT)
    assert window.settings.recent_pairs[0] == (window.settings.target_path, window.settings.draft_path)
    qtbot.waitUntil(lambda: window.client.info is not None and
                    str(window.client.info.target_path).endswith(TARGET), timeout=LOAD_TIMEOUT_MS)


def test_with_the_hub_down_the_dialog_says_it_in_one_line(make_window, qtbot, demo_models, hub, monkeypatch):
    boxes = []
    for kind in ("critical", "warning", "information"):
        monkeypatch.setattr(QMessageBox, kind, lambda *a, **k: boxes.append(a))
    window = make_window(demo_settings(demo_models))
    wait_loaded(qtbot, window)
    hub.stop()
    dialog = window.steering.hub.open()
    dialog.query.setText("smollm")
    dialog.search_button.click()
    qtbot.waitUntil(lambda: "cannot reach" in dialog.status.text(), timeout=TIMEOUT_MS)
    assert "\n" not in dialog.status.text() and dialog.search_button.isEnabled()
    pick = dialog.results.topLevelItem(0).child(0)
    dialog.results.setCurrentItem(pick)  # a pick plans over the network too
    qtbot.waitUntil(lambda: "cannot reach" in dialog.plan.text(), timeout=TIMEOUT_MS)
    assert not dialog.download_button.isEnabled()
    assert boxes == [] and not [w for w in QApplication.topLevelWidgets()
                                if isinstance(w, QMessageBox) and w.isVisible()]
