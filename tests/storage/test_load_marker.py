"""The loading mark: left by a process that died loading, ignored while its process lives."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from app.storage import load_marker

ROOT = Path(__file__).resolve().parents[2]


def mark_in_child(folder: Path, target: str, draft: str, *, then: str) -> subprocess.Popen:
    """A real other process that marks a load, then does ``then`` (dies, or waits)."""
    code = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from app.storage import load_marker
        load_marker.begin({target!r}, {draft!r}, folder=Path({str(folder)!r}))
        print("marked", flush=True)
        {then}
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert child.stdout.readline().strip() == "marked"
    return child


def test_a_process_that_died_loading_leaves_its_mark(tmp_path):
    child = mark_in_child(tmp_path, "/models/big.gguf", "/models/small.gguf", then="os.abort()")
    child.wait()
    assert child.returncode < 0
    crashed = load_marker.crashed_load(folder=tmp_path)
    assert crashed is not None and crashed.pid == child.pid
    assert crashed.matches("/models/big.gguf", "/models/small.gguf")
    assert not crashed.matches("/models/big.gguf", "")
    assert crashed.describe() == "big.gguf and small.gguf"


def test_a_load_in_progress_elsewhere_is_not_a_crash(tmp_path):
    child = mark_in_child(tmp_path, "", "", then="time.sleep(60)")
    try:
        assert load_marker.crashed_load(folder=tmp_path) is None
    finally:
        child.kill()
        child.wait()
    crashed = load_marker.crashed_load(folder=tmp_path)
    assert crashed is not None and crashed.describe() == "the demo models"


def test_a_finished_load_leaves_nothing(tmp_path):
    load_marker.begin("/m/a.gguf", "", folder=tmp_path)
    assert load_marker.crashed_load(folder=tmp_path) is None  # this very process: still loading
    load_marker.finish(folder=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_new_load_forgets_old_crashes(tmp_path):
    mark_in_child(tmp_path, "/m/a.gguf", "", then="os._exit(1)").wait()
    assert load_marker.crashed_load(folder=tmp_path) is not None
    load_marker.begin("/m/b.gguf", "", folder=tmp_path)
    assert load_marker.crashed_load(folder=tmp_path) is None
    load_marker.finish(folder=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_damaged_or_foreign_marks_are_ignored(tmp_path):
    (tmp_path / "loading-123.json").write_text("{not json")
    (tmp_path / "loading-456.json").write_text('{"target_path": "x", "draft_path": "", "pid": 789}')  # name lies
    (tmp_path / "loading-7.json").mkdir()
    assert load_marker.crashed_load(folder=tmp_path) is None


def test_a_path_that_is_not_utf8_survives_the_round_trip(tmp_path):
    target = os.fsdecode(b"/models/bad-\xff.gguf")
    mark_in_child(tmp_path, target, "", then="os._exit(1)").wait()
    crashed = load_marker.crashed_load(folder=tmp_path)
    assert crashed.matches(target, "") and crashed.describe() == "bad-\\xff.gguf"
