"""The headless CLI on the real demo pair: output shape, and bad input as one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "engine"))
from gguf_factory import kv, raw_gguf, u32, u64, write_vocab_gguf  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def tandem(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_generate_json_reports_tokens_text_and_stats(demo_models):
    result = tandem("generate", "--prompt", "Write a Python function that reverses a linked list.",
                    "--json", "--draft-max", "5", "--max-tokens", "64", "--ignore-eos", "--no-copy")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(record) == {"tokens", "text", "stats"}
    assert len(record["tokens"]) == 64
    assert {t["kind"] for t in record["tokens"]} <= {"accepted", "corrected", "bonus", "plain"}
    assert "".join(t["text"] for t in record["tokens"]) == record["text"]
    stats = record["stats"]
    for key in ("tokens", "rounds", "drafted", "accepted", "acceptance", "tokens_per_round", "tokens_per_second"):
        assert key in stats
    assert stats["tokens"] == 64
    assert stats["copied"] == 0
    assert stats["acceptance"] >= 0.9  # the demo draft model's own guesses
    assert stats["tokens_per_round"] == pytest.approx(64 / stats["rounds"], abs=1e-3)


def test_generate_prompts_file_one_line_each(demo_models, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Say hi.", "seed": 1}\n\n{"prompt": "Count to three."}\n')
    result = tandem("generate", "--prompts", str(prompts), "--json", "--max-tokens", "8", "--no-speculation")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all(t["kind"] == "plain" for line in lines for t in json.loads(line)["tokens"])


def test_raw_prompt_is_sent_as_is(demo_models):
    result = tandem("generate", "--raw", "--prompt", "The capital of France is", "--max-tokens", "4",
                    "--json", "--no-speculation")
    assert result.returncode == 0, result.stderr
    assert "Paris" in json.loads(result.stdout)["text"]


def test_a_reply_that_repeats_the_prompt_is_copied_not_drafted(demo_models):
    prompt = "Repeat this list exactly: apples, pears, plums, cherries, grapes, lemons, limes, figs, dates."
    result = tandem("generate", "--prompt", prompt, "--json", "--max-tokens", "48", "--draft-max", "5")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert "apples, pears, plums, cherries" in record["text"]
    assert record["stats"]["copied_accepted"] >= 5


def test_lookup_drafter_runs(demo_models):
    result = tandem("generate", "--drafter", "lookup", "--prompt", "Repeat exactly: one two three four five six",
                    "--json", "--max-tokens", "24")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stats"]["speculative"] is True


def test_check_pair_compatible_and_not(demo_models, tmp_path):
    ok = tandem("check-pair", str(demo_models.target), str(demo_models.draft), "--json")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["compatible"] is True
    other = write_vocab_gguf(tmp_path / "other.gguf")
    bad = tandem("check-pair", str(demo_models.target), str(other))
    assert bad.returncode == 1
    assert "vocab" in bad.stdout


def test_incompatible_draft_falls_back_to_plain_and_says_why(demo_models, tmp_path):
    other = write_vocab_gguf(tmp_path / "other.gguf")
    result = tandem("generate", "--target", str(demo_models.target), "--draft", str(other),
                    "--prompt", "Hello", "--max-tokens", "4", "--json")
    assert result.returncode == 0
    assert "incompatible" in result.stderr and "without speculation" in result.stderr
    stats = json.loads(result.stdout)["stats"]
    assert stats["speculative"] is False and "incompatible" in stats["note"]


def _bad_files(tmp_path: Path, demo_models) -> dict[str, tuple[Path, str]]:
    text = tmp_path / "notes.gguf"
    text.write_text("just some text, not a model\n")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(demo_models.draft.read_bytes()[: 5_000_000])
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(demo_models.draft.read_bytes()[:10])
    huge_array = tmp_path / "huge.gguf"
    huge_array.write_bytes(raw_gguf([kv("k", 9, u32(4) + u64(2**63))]))  # 2^63-element array
    v1 = tmp_path / "v1.gguf"
    v1.write_bytes(raw_gguf(version=1))
    many_tensors = tmp_path / "tensors.gguf"
    many_tensors.write_bytes(raw_gguf(n_tensors=2**60))
    return {
        "missing": (tmp_path / "nope.gguf", "does not exist"),
        "directory": (tmp_path, "directory"),
        "not gguf": (text, "not a GGUF"),
        "truncated": (truncated, "truncated.gguf"),
        "header only": (header_only, "header.gguf"),
        "array past end": (huge_array, "huge.gguf"),
        "version": (v1, "version"),
        "counts past end": (many_tensors, "tensors.gguf"),
    }


def test_bad_model_files_get_one_clear_line(demo_models, tmp_path):
    for case, (path, needle) in _bad_files(tmp_path, demo_models).items():
        result = tandem("generate", "--target", str(path), "--prompt", "hi", "--max-tokens", "2", timeout=60)
        assert_one_line_error(result, needle)
        assert result.returncode == 2, case


def test_bad_draft_file_is_refused_too(demo_models, tmp_path):
    path, needle = _bad_files(tmp_path, demo_models)["truncated"]
    result = tandem("generate", "--target", str(demo_models.target), "--draft", str(path), "--prompt", "hi")
    assert_one_line_error(result, needle)


def test_prompt_longer_than_context(demo_models):
    result = tandem("generate", "--prompt", "word " * 400, "--n-ctx", "256", "--max-tokens", "8")
    assert_one_line_error(result, "context")


def test_bad_prompts_file(tmp_path):
    broken = tmp_path / "p.jsonl"
    broken.write_text("{not json\n")
    result = tandem("generate", "--prompts", str(broken))
    assert_one_line_error(result, "p.jsonl:1")
