"""``tandem bench --workload agent``: the agent sessions replayed through Tandem's own
API, started in the bench's process; its figures hold together on a tiny run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench.agent import AgentBenchError, read_sessions, summary

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "app", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def test_the_shipped_sessions_read_and_a_limit_takes_the_first():
    sessions = read_sessions()
    assert len(sessions) == 5 and all(s["system"] and len(s["turns"]) >= 3 for s in sessions)
    assert read_sessions(limit=2) == sessions[:2]


def test_a_bad_sessions_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "turns": []}\n')
    with pytest.raises(AgentBenchError, match=r"bad.jsonl:1: expected"):
        read_sessions(bad)


def test_summary_counts_reuse_of_later_turns_apart():
    def result(turn, prompt, cached, tokens, speed, ttft):
        return {"turn": turn, "ttft": ttft, "text": "",
                "usage": {"prompt_tokens": prompt, "completion_tokens": tokens,
                          "prompt_tokens_details": {"cached_tokens": cached}},
                "timings": {"predicted_ms": tokens / speed * 1000, "predicted_per_second": speed},
                "tandem": {"drafted": 10, "accepted": 8, "rounds": 4}}

    figures = summary([result(0, 100, 0, 10, 10.0, 1.0), result(1, 200, 150, 10, 20.0, 0.5),
                       result(2, 300, 250, 10, 30.0, 0.25)])
    assert figures["turns"] == 3 and figures["completion_tokens"] == 30
    assert figures["tokens_per_second"] == 20.0  # the median over turns
    assert figures["prompt_reused"] == round(400 / 600, 3)
    assert figures["prompt_reused_later_turns"] == round(400 / 500, 3)
    assert figures["ttft_first_turn_s"] == 1.0 and figures["ttft_later_turns_s"] == 0.375
    assert figures["acceptance"] == 0.8 and figures["tokens_per_round"] == 2.5


@pytest.mark.parametrize("args, words", [
    (["--busy", "1"], "--busy does not apply to --workload agent"),
    (["--draft-max", "3,5"], "one draft setting"),
    (["--copy", "both"], "one draft setting"),
    (["--repeat", "2"], "--repeat does not apply"),
])
def test_what_the_agent_workload_cannot_do_is_refused_before_loading(args, words):
    result = bench("--workload", "agent", *args)
    assert result.returncode == 1 and words in result.stderr and "Traceback" not in result.stderr


def test_url_is_for_the_agent_workload_only():
    result = bench("--url", "http://127.0.0.1:9/v1")
    assert result.returncode == 1 and "--url applies to --workload agent only" in result.stderr


def test_a_tiny_agent_run(demo_models):
    result = bench("--workload", "agent", "--limit", "1", "--turns", "2", "--max-tokens", "4", "--json",
                   timeout=900)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    spec, plain = report["speculative"], report["plain"]
    assert spec["turns"] == plain["turns"] == 2
    assert report["identical_text"] is True  # greedy, lossless: the same replies in both modes
    assert spec["completion_tokens"] == plain["completion_tokens"] <= 8
    # The second turn resends the first with its reply: the cache holds all of it.
    assert spec["prompt_reused_later_turns"] > 0.5 and plain["prompt_reused_later_turns"] > 0.5
    assert spec["acceptance"] is not None and plain["acceptance"] is None
    assert plain["tokens_per_round"] == 1.0
    assert "python-bugfix" in result.stderr  # the per-session lines
