"""The headless CLI on the real demo pair: output shape, and bad input as one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_factory import kv, raw_gguf, u32, u64, write_vocab_gguf

ROOT = Path(__file__).resolve().parents[2]


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
                    "--json", "--draft-max", "5", "--max-tokens", "64", "--ignore-eos", "--no-copy", "--temperature", "0")
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
                    "--json", "--no-speculation", "--temperature", "0")
    assert result.returncode == 0, result.stderr
    assert "Paris" in json.loads(result.stdout)["text"]


def test_a_reply_that_repeats_the_prompt_is_copied_not_drafted(demo_models):
    prompt = "Repeat this list exactly: apples, pears, plums, cherries, grapes, lemons, limes, figs, dates."
    result = tandem("generate", "--prompt", prompt, "--json", "--max-tokens", "48", "--draft-max", "5",
                    "--temperature", "0")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert "apples, pears, plums, cherries" in record["text"]
    assert record["stats"]["copied_accepted"] >= 5


def test_lookup_drafter_runs(demo_models):
    result = tandem("generate", "--drafter", "lookup", "--prompt", "Repeat exactly: one two three four five six",
                    "--json", "--max-tokens", "24")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stats"]["speculative"] is True


def test_check_pair_compatible_and_through_text(demo_models, tmp_path):
    from hostile_models import write_model

    ok = tandem("check-pair", str(demo_models.target), str(demo_models.draft), "--json")
    assert ok.returncode == 0
    verdict = json.loads(ok.stdout)
    assert verdict["compatible"] is True and verdict["through_text"] is False
    other = write_model(tmp_path / "other.gguf")  # a tiny SentencePiece llama: another vocabulary
    bridged = tandem("check-pair", str(demo_models.target), str(other))
    assert bridged.returncode == 0, bridged.stderr
    line = bridged.stdout.strip()
    assert line.startswith("Drafts through text; acceptance is measured, not promised")
    assert "BPE ('gpt2', 49,152 tokens)" in line and "SentencePiece ('llama', 288 tokens)" in line
    assert "Compatible" not in bridged.stdout


def test_a_draft_of_another_vocabulary_drafts_through_text(demo_models, tmp_path):
    from hostile_models import write_model

    other = write_model(tmp_path / "other.gguf")
    result = tandem("generate", "--target", str(demo_models.draft), "--draft", str(other),
                    "--prompt", "Hello", "--max-tokens", "8", "--draft-max", "3", "--temperature", "0", "--json")
    assert result.returncode == 0, result.stderr
    assert "incompatible" not in result.stderr
    stats = json.loads(result.stdout)["stats"]
    # Its vocabulary cannot write this text back (no "▁": spaces come out as the bytes of
    # U+2581), so it proposes nothing, and the reply is the target's as ever.
    assert stats["speculative"] is True and stats["bridged"] == 0
    plain = tandem("generate", "--target", str(demo_models.draft), "--prompt", "Hello", "--max-tokens", "8",
                   "--no-speculation", "--temperature", "0", "--json")
    assert json.loads(plain.stdout)["text"] == json.loads(result.stdout)["text"]


def test_a_broken_draft_of_another_vocabulary_is_one_line(demo_models, tmp_path):
    other = write_vocab_gguf(tmp_path / "other.gguf")  # a vocabulary and no weights
    bad = tandem("check-pair", str(demo_models.target), str(other))
    assert bad.returncode != 0 and "other.gguf" in bad.stderr and "Traceback" not in bad.stderr


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
        assert result.returncode == 1, case  # the command was fine; the file is not


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


# -- llama.cpp's option names, values, exit codes ------------------------------------------------
def test_llama_cpp_spellings_are_aliases_of_the_same_options():
    from app.cli.main import build_parser

    parser = build_parser()
    short = parser.parse_args(["generate", "-p", "hi", "-m", "t.gguf", "-md", "d.gguf", "-c", "512", "-n", "7",
                               "-ngl", "3", "-ngld", "1", "--draft-p-min", "0.5", "--temp", "0.3", "-t", "2",
                               "-s", "5"])
    long = parser.parse_args(["generate", "--prompt", "hi", "--target", "t.gguf", "--draft", "d.gguf",
                              "--n-ctx", "512", "--max-tokens", "7", "--gpu-layers", "3", "--draft-gpu-layers", "1",
                              "--p-min", "0.5", "--temperature", "0.3", "--threads", "2", "--seed", "5"])
    spelled = parser.parse_args(["generate", "--prompt", "hi", "--model", "t.gguf", "--model-draft", "d.gguf",
                                 "--ctx-size", "512", "--n-predict", "7", "--n-gpu-layers", "3",
                                 "--n-gpu-layers-draft", "1", "--draft-p-min", "0.5", "--temp", "0.3", "-t", "2",
                                 "-s", "5"])
    assert vars(short) == vars(long) == vars(spelled)
    assert (short.target, short.draft, short.n_ctx, short.max_tokens) == (Path("t.gguf"), Path("d.gguf"), 512, 7)
    assert (short.gpu_layers, short.draft_gpu_layers, short.p_min, short.temperature, short.threads, short.seed) \
        == (3, 1, 0.5, 0.3, 2, 5)
    # The same names before the command, and -ngl alone still sets both models.
    from app.terminal.shared import draft_gpu_layers

    before = parser.parse_args(["-m", "t.gguf", "-ngl", "0", "chat"])
    assert before.target == Path("t.gguf") and draft_gpu_layers(before) == 0
    assert parser.parse_args(["generate", "-p", "x", "-s", "-1"]).seed is None  # -1: a new seed each run


def test_every_option_says_its_default_in_the_help():
    from app.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    for name in ("generate", "chat", "bench"):
        for action in sub.choices[name]._actions:
            if action.option_strings and action.nargs != 0 and action.dest not in ("help", "prompt", "prompts"):
                assert "default" in (action.help or ""), (name, action.option_strings)


def test_version():
    result = tandem("--version", timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith("tandem 0.1.0 (llama-cpp-python ")


@pytest.mark.parametrize("args, needle", [
    (["--temperature", "nan"], "not a finite number"),
    (["--temp", "inf"], "not a finite number"),
    (["--seed", "-5"], "out of range"),
    (["--top-p", "2"], "out of range"),
    (["--top-p", "0"], "out of range"),
    (["--threads", "-1"], "out of range"),
    (["--max-tokens", "0"], "out of range"),
    (["--n-ctx", str(2**33)], "out of range"),
    (["--n-ctx", "0"], "out of range"),
    (["--draft-max", "65"], "out of range"),
    (["--min-p", "-0.1"], "out of range"),
    (["--seed", "9" * 5000], "is not a whole number"),
])
def test_bad_values_are_usage_errors(args, needle):
    result = tandem("generate", "--prompt", "hi", *args, timeout=60)
    assert result.returncode == 2
    assert_one_line_error(result, needle)


def test_bad_prompt_files_are_usage_errors(tmp_path):
    cases = {
        "seed.jsonl": ('{"prompt": "hi", "seed": "abc"}\n', "seed.jsonl:1"),
        "float.jsonl": ('{"prompt": "hi", "seed": 1.5}\n', "float.jsonl:1"),
        "surrogate.jsonl": ('{"prompt": "\\ud800"}\n', "surrogate.jsonl:1"),
        "list.jsonl": ('["prompt"]\n', "list.jsonl:1"),
        "deep.jsonl": ("[" * 100_000 + "]" * 100_000 + "\n", "deep.jsonl:1"),
    }
    for name, (content, needle) in cases.items():
        (tmp_path / name).write_text(content)
        result = tandem("generate", "--prompts", str(tmp_path / name), timeout=60)
        assert result.returncode == 2, name
        assert_one_line_error(result, needle)
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    assert_one_line_error(tandem("generate", "--prompts", str(tmp_path / "latin1.jsonl"), timeout=60), "not UTF-8")
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    result = tandem("generate", "--prompts", str(fifo), timeout=60)  # must not block
    assert result.returncode == 2
    assert_one_line_error(result, "not a regular file")


def test_invalid_utf8_on_the_command_line_is_refused():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "app", "generate", "--prompt", b"caf\xe9"],
                            capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert result.returncode == 2
    assert_one_line_error(result, "not valid UTF-8")


def test_a_llama_cpp_build_that_dies_is_one_line_with_the_rebuild_command(demo_models):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_PROBE_SIMULATE_SIGNAL="SIGILL")
    result = subprocess.run([sys.executable, "-m", "app", "generate", "--prompt", "hi", "--max-tokens", "2"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert result.returncode == 1
    assert_one_line_error(result, "killed by SIGILL", "Rebuild it with: python3 ", "installers/setup.py")


def test_bench_runs_from_an_installed_copy_outside_the_checkout(demo_models, tmp_path):
    """pip installs the project (not editable) into a folder; the bench runs there on its own prompts."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(ROOT)], check=True, capture_output=True, timeout=300)
    assert (site / "app" / "resources" / "bench_prompts.jsonl").is_file()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    work = tmp_path / "elsewhere"
    work.mkdir()
    result = subprocess.run([sys.executable, "-m", "app", "bench", "--limit", "2", "--max-tokens", "8", "--repeat", "1",
                             "--draft-max", "3", "--json"], capture_output=True, text=True, timeout=300,
                            env=env, cwd=work)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["overall"]["prompts"] == 2
    assert set(report["by_category"]) == {"writing", "roleplay"}  # round-robin over the shipped set's first two

