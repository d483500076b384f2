"""``tandem bench --busy N`` and ``--workload edit``: busy children come and go, the edit
workload is valid and runs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.bench.report import busy_comparison
from app.bench.speedup import EDIT_WORKLOAD, WORKLOADS, BenchError, prompts_path, read_prompts
from app.bench.busy import busy_cores

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """Running and not a zombie (a zombie is dead but not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _children_of(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_busy_children_spin_while_the_block_runs_and_are_gone_after():
    with busy_cores(2) as children:
        pids = [c.pid for c in children]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        time.sleep(0.3)
        assert all(c.poll() is None for c in children)  # spinning, not exited
    assert not any(_alive(p) for p in pids)


def test_busy_children_are_stopped_when_the_block_fails():
    with pytest.raises(RuntimeError):
        with busy_cores(1) as children:
            pid = children[0].pid
            raise RuntimeError("the bench failed")
    assert not _alive(pid)


def test_a_busy_child_ends_by_itself_at_its_time_limit():
    with busy_cores(1, limit_s=0.2) as children:
        assert children[0].wait(timeout=30) == 0


def test_a_busy_child_ends_when_its_parent_is_gone():
    """A bench killed outright: its spinners notice the parent is gone and stop."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from app.bench.busy import busy_cores\n"
         "with busy_cores(1) as c:\n print(c[0].pid, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_the_edit_workload_is_valid():
    prompts = read_prompts(EDIT_WORKLOAD, None, None)
    assert 12 <= len(prompts) <= 20
    assert {p.category for p in prompts} == {"fix", "rename", "rewrite", "translate"}
    records = [json.loads(line) for line in EDIT_WORKLOAD.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len({r["question_id"] for r in records}) == len(records)
    for prompt in prompts:
        assert len(prompt.text) > 120  # each request carries the text or code it works on


def test_workload_option_picks_the_file_and_refuses_two_prompt_sets(tmp_path):
    def args(**kw):
        return argparse.Namespace(**{"prompts": None, "workload": "default", **kw})

    assert prompts_path(args()) == WORKLOADS["default"]
    assert prompts_path(args(workload="edit")) == EDIT_WORKLOAD
    own = tmp_path / "mine.jsonl"
    assert prompts_path(args(prompts=own)) == own
    with pytest.raises(BenchError, match="--prompts and --workload"):
        prompts_path(args(prompts=own, workload="edit"))
    assert prompts_path(args(workload="regenerate")) == WORKLOADS["default"]
    assert prompts_path(args(prompts=own, workload="regenerate")) == own  # regenerates any prompts


def test_the_cli_refuses_an_unknown_workload():
    result = subprocess.run([sys.executable, "-m", "app", "bench", "--workload", "poetry"], capture_output=True,
                            text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert result.returncode != 0 and "invalid choice: 'poetry'" in result.stderr
    assert "Traceback" not in result.stderr


def test_busy_comparison_is_busy_over_quiet():
    def report(plain, spec):
        return {"auto": {"overall": {"plain_tokens_per_second": plain, "spec_tokens_per_second": spec}}}

    row = busy_comparison(report(40.0, 50.0), report(30.0, 20.0))["auto"]
    assert row == {"plain_quiet": 40.0, "plain_busy": 30.0, "plain_ratio": 0.75,
                   "spec_quiet": 50.0, "spec_busy": 20.0, "spec_ratio": 0.4}


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_bench_busy_edit_workload_tiny_run(demo_models):
    """One edit prompt, a few tokens, one busy process: both figures side by side, and no
    busy child left once the bench has exited."""
    bench = subprocess.Popen(
        [sys.executable, "-m", "app", "bench", "--workload", "edit", "--limit", "1", "--max-tokens", "6", "--repeat", "1",
         "--draft-max", "4", "--busy", "1", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT)
    seen_children: set[int] = set()
    while bench.poll() is None:  # watch for the spinner while it runs
        seen_children |= {pid for pid in _children_of(bench.pid) if b"getppid" in _cmdline(pid)}
        time.sleep(0.05)
    out, err = bench.communicate(timeout=600)
    assert bench.returncode == 0, err
    report = json.loads(out)
    assert report["busy_processes"] == 1
    assert report["quiet"]["overall"]["prompts"] == report["busy"]["overall"]["prompts"] == 1
    row = report["busy_vs_quiet"]["4"]
    assert row["plain_quiet"] > 0 and row["spec_busy"] > 0
    assert row["plain_ratio"] == pytest.approx(row["plain_busy"] / row["plain_quiet"], rel=1e-2)
    assert set(report["threads"]) == {"quiet", "busy"}
    assert len(seen_children) == 1
    assert not any(_alive(pid) for pid in seen_children)


def test_the_regenerate_workload_copies_from_the_reply_it_replaces(demo_models):
    """Each run regenerates the prompt's greedy reply with that reply as a copy source, as
    Regenerate does in the app: at temperature 0 most of the new reply is copied from it,
    where the same prompts without a replaced reply copy little."""
    def bench(workload: str) -> dict:
        result = subprocess.run(
            [sys.executable, "-m", "app", "bench", "--workload", workload, "--limit", "2", "--max-tokens", "48",
             "--repeat", "1", "--draft-max", "4", "--temperature", "0", "--json"],
            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=600)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["overall"]

    regenerated, first = bench("regenerate"), bench("default")
    assert regenerated["prompts"] == first["prompts"] == 2
    assert regenerated["copied_share"] > 0.5 > first["copied_share"]
    assert regenerated["copy_acceptance"] > 0.9  # the greedy target writes the same reply again
