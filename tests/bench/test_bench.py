"""``tandem bench`` runs on a tiny prompt set and its report is self-consistent."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.bench.report import Resampled, ideal_speedup, middle_run, summarize
from app.bench.speedup import BenchPrompt, bench_specs, read_prompts
from app.engine.types import COPY_MIN, Stats

ROOT = Path(__file__).resolve().parents[2]


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


def test_middle_run_is_the_median_by_seconds_per_token():
    fast, middle, slow = Stats(tokens=100, seconds=2.0), Stats(tokens=50, seconds=1.5), Stats(tokens=100, seconds=9.0)
    assert middle_run([slow, fast, middle]) is middle
    assert middle_run([slow, fast]) is fast  # of two, the faster: load only ever slows a run
    assert middle_run([slow]) is slow


def _runs(plain_seconds, spec_seconds):
    """Per prompt: a plain run and two settings' runs, 100 tokens each."""
    return [{"plain": Stats(tokens=100, seconds=p), "8": Stats(tokens=100, seconds=s8),
             "auto": Stats(tokens=100, seconds=sa, rounds=10, drafted=80, accepted=70, rejections=5)}
            for p, (s8, sa) in zip(plain_seconds, spec_seconds)]


def test_resampled_intervals_are_exact_when_every_prompt_agrees():
    runs = _runs([2.0, 4.0, 3.0], [(1.0, 1.0), (2.0, 2.0), (1.5, 1.5)])
    intervals = Resampled(runs)
    assert intervals.speedup("8") == [2.0, 2.0]
    assert intervals.ratio("auto", "8") == {"ratio": 1.0, "ci": [1.0, 1.0]}


def test_resampled_intervals_widen_with_disagreeing_prompts_and_hold_the_estimate():
    rng = random.Random(1)
    plain = [rng.uniform(2, 3) for _ in range(20)]
    spec = [(p / rng.uniform(1.1, 1.5), p / rng.uniform(1.1, 1.5)) for p in plain]
    prompts = [BenchPrompt("a" if i % 2 else "b", "q") for i in range(20)]
    report = summarize(prompts, _runs(plain, spec), [8, "auto"])
    for setting in ("8", "auto"):
        low, high = report[setting]["overall"]["speedup_ci"]
        assert low < report[setting]["overall"]["speedup"] < high
        assert high - low > 0.02
    compared = report["auto"]["vs_fixed"]["8"]
    assert compared["ratio"] == pytest.approx(report["auto"]["overall"]["speedup"] / report["8"]["overall"]["speedup"],
                                              rel=1e-3)
    assert compared["ci"][0] < compared["ratio"] < compared["ci"][1]
    assert "vs_fixed" not in report["8"]
    assert "vs_fixed" not in summarize(prompts, _runs(plain, spec), ["auto"])["auto"]


def test_bench_json_and_chart(demo_models, tmp_path):
    prompts = tmp_path / "tiny.jsonl"
    prompts.write_text(
        json.dumps({"question_id": 1, "category": "writing", "turns": ["Write a haiku about rain."]}) + "\n"
        + json.dumps({"question_id": 2, "category": "coding", "turns": ["Write hello world in C."]}) + "\n")
    chart = tmp_path / "chart.png"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--prompts", str(prompts), "--max-tokens", "24", "--repeat", "1",
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
    # By default the bench samples as the app does, and splits the time four ways.
    assert report["sampling"] == "T 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 0"
    overall = report["overall"]
    split = overall["seconds_split"]
    assert set(split) == {"draft_llama", "target_llama", "draft_host", "verify_host"}
    assert all(v > 0 for v in split.values())
    # Per round and per drafted token: the same host time over rounds and over drafted tokens.
    assert overall["host_ms_per_round"] > 0 and overall["host_ms_per_drafted"] > 0
    assert overall["host_ms_per_round"] / overall["host_ms_per_drafted"] == pytest.approx(
        overall["mean_draft_length"], rel=0.01)
    assert "host drafting" in subprocess.run(
        [sys.executable, "-m", "app", "bench", "--prompts", str(prompts), "--max-tokens", "8", "--repeat", "1",
         "--draft-max", "4", "--limit", "1"], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT).stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_list_of_draft_lengths(demo_models, tmp_path):
    prompts = tmp_path / "one.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three colours."}) + "\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--prompts", str(prompts), "--max-tokens", "12",
         "--draft-max", "2,auto", "--repeat", "2", "--copy", "both", "--json", "--temperature", "0"],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sampling"] == "greedy"
    report = json.loads(result.stdout)["by_draft_max"]
    assert set(report) == {"2", "auto", "2 nocopy", "auto nocopy"}
    assert report["2"]["overall"]["prompts"] == 1  # two runs of the one prompt count as one

    def speedup(setting):
        return report[setting]["overall"]["speedup"]

    compared = report["auto"]["vs_fixed"]["2"]
    assert compared["ratio"] == pytest.approx(speedup("auto") / speedup("2"), rel=1e-2)
    # One prompt: every draw of prompts is that prompt, so the interval is the measurement.
    assert compared["ci"] == [compared["ratio"]] * 2
    # Copying or not, auto is set against the fixed length run the same way.
    assert set(report["auto nocopy"]["vs_fixed"]) == {"2 nocopy"}
    assert report["auto"]["vs_no_copy"]["ratio"] == pytest.approx(speedup("auto") / speedup("auto nocopy"), rel=1e-2)
    assert report["2 nocopy"]["overall"]["copied_share"] == 0.0


def test_bench_specs_label_copying_and_not():
    specs = bench_specs([8, "auto"], "both")
    assert list(specs) == ["8", "8 nocopy", "auto", "auto nocopy"]
    assert specs["8"].copy_min == COPY_MIN and specs["8 nocopy"].copy_min == 0
    assert specs["auto nocopy"].draft_max == "auto"
    assert list(bench_specs([8], "off")) == ["8"] and bench_specs([8], "off")["8"].copy_min == 0
    assert bench_specs([8], "on")["8"].copy_min == COPY_MIN


def test_bench_refuses_zero_runs(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "app", "bench", "--repeat", "0"],
                            capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip() == ("tandem: error: argument --repeat: 0 is out of range (at least 1) "
                                     "(see tandem bench --help)")


def test_each_setting_keeps_its_own_policy():
    """measure hands every setting its own policy (auto's measurements from one setting
    must not steer another), the same one on every prompt and run."""
    from app.bench.speedup import measure
    from app.engine.speculation.draft_policy import AutoDraftLength, FixedDraftLength
    from app.engine.types import SpecConfig

    from markov_backend import MarkovBackend

    class Recorder:
        def __init__(self) -> None:
            self.handed: list[tuple[str, object]] = []

        def generate(self, tokens, sampling, spec, max_tokens, *, policy, copy_sources=None):
            self.handed.append((spec, policy))
            return type("Run", (), {"run": lambda self: [], "stats": Stats(tokens=1, seconds=1.0)})()

    engine = Recorder()
    settings = {"auto": SpecConfig(draft_max="auto", copy_min=COPY_MIN), "auto nocopy": SpecConfig(draft_max="auto"),
                "4": SpecConfig(draft_max=4)}
    prompts = [BenchPrompt("a", "one"), BenchPrompt("b", "two")]
    measure(engine, MarkovBackend(np.zeros((256, 256)), n_ctx=4096), prompts, settings, 8, repeat=2)
    by_spec: dict[int, set[int]] = {}  # by identity: the two auto settings differ only in copying
    for spec, policy in engine.handed:
        by_spec.setdefault(id(spec), set()).add(id(policy))
    assert all(len(ids) == 1 for ids in by_spec.values())   # one policy per setting, all along
    assert len(set().union(*by_spec.values())) == len(by_spec) == 4  # plain and three settings
    policies = {id(spec): policy for spec, policy in engine.handed}
    assert isinstance(policies[id(settings["auto"])], AutoDraftLength)
    assert isinstance(policies[id(settings["4"])], FixedDraftLength) and policies[id(settings["4"])].length == 4


def test_bench_specs_run_lines_and_trees_side_by_side():
    specs = bench_specs(["auto"], "on", ["off", "on"])
    assert list(specs) == ["auto", "auto tree=on"]
    assert specs["auto"].tree == "off" and specs["auto tree=on"].tree == "on"
    assert bench_specs([8])["8"].tree == "auto"  # as in the app
