"""``tandem bench --method``: self makes (or reuses) a draft from the target, auto picks
the draft made for a target given alone, lookahead runs the target alone, and a method
not in this build says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench.methods import names

ROOT = Path(__file__).resolve().parents[2]


def bench(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "app", "bench", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)


def test_every_method_is_a_choice():
    """Each drafter kind's method (app/drafter_kinds.py), then the bench's own."""
    assert names() == ["chain", "lookup", "lookahead", "mtp", "eagle3", "tree", "text", "self", "auto"]


def test_chain_and_tree_set_the_trees_the_bench_runs(demo_models, tmp_path):
    prompts = tmp_path / "one.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three colours."}) + "\n")
    for method, tree in (("chain", "off"), ("tree", "on")):
        result = bench(tmp_path / "home", "--method", method, "--prompts", str(prompts), "--max-tokens", "6",
                       "--draft-max", "3", "--repeat", "1", "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["method"] == method and f"method {method}:" in result.stderr
        assert f"SpecConfig.tree {tree}" in result.stderr or (method == "chain" and "straight drafts" in result.stderr)


def test_a_method_not_in_this_build_says_so_in_one_line(monkeypatch):
    import argparse

    from app.bench import methods as bench_methods

    monkeypatch.setitem(bench_methods._METHODS, "medusa", bench_methods.Method("medusa", "heads trained to draft", None))
    with pytest.raises(bench_methods.MethodUnavailable) as raised:
        bench_methods.prepare(argparse.Namespace(method="medusa"), lambda *a: None)
    message = str(raised.value)
    assert "\n" not in message and "--method medusa" in message and "not available in this build" in message


def test_lookahead_runs_the_target_alone_and_reports_its_window(demo_models, tmp_path):
    """No draft model loads: the target's own window and pool (and copies) speculate."""
    prompts = tmp_path / "one.jsonl"
    prompts.write_text(json.dumps({"prompt": "Count from 1 to 20, separated by commas."}) + "\n")
    result = bench(tmp_path / "home", "--method", "lookahead", "--prompts", str(prompts), "--max-tokens", "24",
                   "--draft-max", "4", "--repeat", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["method"] == "lookahead" and report["overall"]["prompts"] == 1
    assert "method lookahead: the target alone, its Jacobi window" in result.stderr
    window = report["lookahead"]
    assert window["pool_ngrams"] > 0 and window["tokens_per_second_with_window"] > 0
    assert f"lookahead: {window['note']}" in result.stderr


def test_self_makes_a_draft_from_the_target_and_auto_then_uses_it(demo_models, tmp_path):
    home = tmp_path / "home"
    prompts = tmp_path / "one.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three colours."}) + "\n")
    common = ["--prompts", str(prompts), "--max-tokens", "8", "--draft-max", "3", "--repeat", "1", "--json"]
    made = bench(home, "--method", "self", "--self-variant", "Q4_0", "--target", str(demo_models.target), *common)
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["method"] == "self" and report["overall"]["prompts"] == 1
    assert "method self: Q4_0 made from SmolLM2-135M-Instruct.F32.gguf" in made.stderr
    drafts = list((home / "data" / "drafts").glob("*.Q4_0.draft.gguf"))
    assert len(drafts) == 1

    auto = bench(home, "--method", "auto", "--target", str(demo_models.target), *common)
    assert auto.returncode == 0, auto.stderr
    assert json.loads(auto.stdout)["method"] == "auto"
    assert f"method auto: self, {drafts[0].name}" in auto.stderr
    assert list((home / "data" / "drafts").glob("*.gguf")) == drafts  # reused, not made again


def test_mtp_drafts_with_the_targets_own_head_and_auto_picks_it(mtp_models, demo_models, tmp_path):
    home = tmp_path / "home"
    prompts = tmp_path / "one.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three colours."}) + "\n")
    common = ["--prompts", str(prompts), "--max-tokens", "8", "--draft-max", "3", "--repeat", "1", "--json"]
    for method, said in (("mtp", "method mtp: the target's own MTP head (1 layer), no draft model"),
                         ("auto", "method auto: mtp, the target's own MTP head")):
        run = bench(home, "--method", method, "--target", str(mtp_models["qwen35"]), *common)
        assert run.returncode == 0, run.stderr[-2000:]
        assert json.loads(run.stdout)["method"] == method and said in run.stderr, run.stderr[-2000:]
    # A target with no head: one line, no traceback.
    none = bench(home, "--method", "mtp", "--target", str(demo_models.target), *common)
    assert none.returncode != 0 and none.stderr.splitlines() == [
        f"tandem: error: --method mtp: {demo_models.target.name}: it has no MTP head"]


def test_a_kinds_method_comes_from_its_declaration(demo_models):
    """A kind that needs nothing runs the target alone; one that runs a draft file of its
    own architecture refuses, in one line, a draft of another or none."""
    import argparse

    from app.bench import methods as bench_methods

    args = argparse.Namespace(method="lookup", drafter="model", draft=demo_models.draft)
    assert bench_methods.prepare(args, lambda *a: None) == "lookup: copies from the context, no draft"
    assert (args.drafter, args.draft) == ("lookup", None)
    for draft, said in ((None, "--method eagle3 needs --draft: a file of architecture eagle3"),
                        (demo_models.draft, f"--method eagle3: {demo_models.draft.name} is of architecture llama, "
                                            "not eagle3")):
        with pytest.raises(bench_methods.MethodUnavailable) as raised:
            bench_methods.prepare(argparse.Namespace(method="eagle3", drafter="model", draft=draft), lambda *a: None)
        assert str(raised.value) == said
