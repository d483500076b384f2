"""``tandem bench`` runs on a tiny prompt set and its report is self-consistent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench import ideal_speedup, read_prompts

ROOT = Path(__file__).resolve().parent.parent


def test_ideal_speedup_matches_design_formula():
    # a = 0.8, k = 4: tokens per round = (1 - 0.8^5) / 0.2 = 3.3616; cost = 4*0.25 + 1.5
    assert ideal_speedup(0.8, 4, 0.25, 1.5) == pytest.approx(3.3616 / 2.5)
    assert ideal_speedup(0.0, 4, 0.25, 1.5) == pytest.approx(1 / 2.5)
    assert ideal_speedup(0.5, 0, 0.25, 1.0) == 1.0


def test_read_prompts_spreads_a_limit_over_categories(tmp_path):
    lines = [{"question_id": i, "category": c, "turns": [f"q{i}"]} for i, c in enumerate("aaabbc")]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    picked = read_prompts(path, 3, None)
    assert sorted(p.category for p in picked) == ["a", "b", "c"]


def test_bench_json_and_chart(demo_models, tmp_path):
    prompts = tmp_path / "tiny.jsonl"
    prompts.write_text(
        json.dumps({"question_id": 1, "category": "writing", "turns": ["Write a haiku about rain."]}) + "\n"
        + json.dumps({"question_id": 2, "category": "coding", "turns": ["Write hello world in C."]}) + "\n")
    chart = tmp_path / "chart.png"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--prompts", str(prompts), "--max-tokens", "24",
         "--draft-max", "4", "--json", "--chart", str(chart)],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["by_category"]) == {"writing", "coding"}
    for row in [*report["by_category"].values(), report["overall"]]:
        for key in ("plain_tokens_per_second", "spec_tokens_per_second", "speedup", "acceptance",
                    "tokens_per_round", "ideal_speedup", "efficiency", "python_overhead"):
            assert key in row
        assert row["speedup"] == pytest.approx(row["spec_tokens_per_second"] / row["plain_tokens_per_second"], rel=1e-2)
        assert row["efficiency"] == pytest.approx(row["speedup"] / row["ideal_speedup"], rel=1e-2)
        assert 0 <= row["acceptance"] <= 1 and 0 <= row["python_overhead"] < 1
        assert 0 < row["c"] < 2 and 0.5 <= row["v"] < 10  # a draft step, a verification: in plain steps
        a, k = row["alpha"], row["mean_draft_length"]
        assert row["ideal_speedup"] == pytest.approx(ideal_speedup(a, k, row["c"], row["v"]), rel=1e-2)
    assert report["overall"]["prompts"] == 2
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_list_of_draft_lengths(demo_models, tmp_path):
    prompts = tmp_path / "one.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three colours."}) + "\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--prompts", str(prompts), "--max-tokens", "12",
         "--draft-max", "2,auto", "--json"], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)["by_draft_max"]) == {"2", "auto"}
