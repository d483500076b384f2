"""Hostile model files through the real CLI: one clean line each, never a signal or a hang.

Every file comes from tests/hostile_models.py: the probe's tiny llama with one lie
that once killed Tandem (GGML_ASSERT, std::out_of_range, an endless tokenizer loop)
or fooled ``check-pair``. Each runs as ``tandem generate`` and ``tandem check-pair``
in a child process with a time limit; the child must exit 1 (runtime error, no
signal) with exactly one ``tandem: error:`` line naming the file and saying why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile_models import CASES, TRIAL_ONLY, write_model

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 30  # the bound for every hostile input
PROMPT = "hi é 中 🙂"


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One TANDEM_HOME for the module: the build probe runs once, no pass lands in the
    user's cache, and what the trial loads remember is this module's alone."""
    return tmp_path_factory.mktemp("tandem-home")


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("honest") / "honest.gguf")


def tandem(home: Path, *args: str | bytes, timeout: float = LIMIT_S) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(home))
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, timeout=timeout,
                            env=env, cwd=ROOT)
    return result, time.perf_counter() - started


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one ``tandem: error:`` line of a clean failure (anything else fails the test)."""
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {stderr[-2000:]}"
    assert result.returncode == 1, (result.returncode, stderr[-2000:])
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_the_honest_model_generates(home, honest):
    """The control: without its lie the same file loads, decodes and is compatible with itself."""
    result, _ = tandem(home, "generate", "--target", str(honest), "--prompt", PROMPT, "--max-tokens", "2",
                       "--no-speculation", timeout=120)  # the first run also probes the llama.cpp build
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    result, _ = tandem(home, "check-pair", str(honest), str(honest))
    assert result.returncode == 0 and b"Compatible" in result.stdout, result.stderr


@pytest.mark.parametrize("name", list(CASES))
def test_generate_refuses_in_one_line(home, honest, tmp_path, name):
    spec, reason = CASES[name]
    path = write_model(tmp_path / f"{name}.gguf", spec)
    result, seconds = tandem(home, "generate", "--target", str(path), "--prompt", PROMPT,
                             "--max-tokens", "2", "--no-speculation")
    line = error_line(result)
    assert f"{name}.gguf: " in line and reason in line, line
    assert seconds < LIMIT_S


@pytest.mark.parametrize("name", list(CASES))
def test_check_pair_never_calls_it_compatible(home, honest, tmp_path, name):
    spec, reason = CASES[name]
    path = write_model(tmp_path / f"{name}.gguf", spec)
    for target, draft in ((path, honest), (honest, path)):
        result, seconds = tandem(home, "check-pair", str(target), str(draft))
        assert b"Compatible" not in result.stdout
        if result.returncode == 1 and not result.stderr.strip():
            # The tokenizers differ: refused as incompatible before any load, in one line.
            assert result.stdout.decode().startswith("Draft is incompatible with target:"), result.stdout
        else:
            line = error_line(result)
            assert f"{name}.gguf: " in line and reason in line, line
        assert seconds < LIMIT_S


def test_trial_only_cases_pass_the_validator(tmp_path):
    """They really are left to the child: no rule catches them, so the test above shows
    the child-process check at work."""
    from app.engine.gguf.header import validate_gguf

    for name in TRIAL_ONLY:
        validate_gguf(write_model(tmp_path / f"{name}.gguf", CASES[name][0]))


def test_a_file_name_that_is_not_utf8(home, tmp_path):
    """Loads, generates and is named in errors (as \\xff), without a traceback."""
    folder = os.fsencode(tmp_path)
    good = write_model(Path(os.fsdecode(folder + b"/good-\xff.gguf")))
    result, _ = tandem(home, "generate", "--target", os.fsencode(good), "--prompt", PROMPT,
                       "--max-tokens", "2", "--no-speculation", timeout=120)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"Traceback" not in result.stderr
    result, _ = tandem(home, "check-pair", os.fsencode(good), os.fsencode(good))
    assert result.returncode == 0 and b"Compatible: good-\\xff.gguf can draft for good-\\xff.gguf." in result.stdout

    spec, _ = CASES["block-count-0"]
    bad = write_model(Path(os.fsdecode(folder + b"/bad-\xfe.gguf")), spec)
    for args in (("generate", "--target", os.fsencode(bad), "--prompt", PROMPT), ("check-pair", os.fsencode(bad), os.fsencode(good))):
        result, _ = tandem(home, *args)
        assert error_line(result).startswith("tandem: error: bad-\\xfe.gguf: 'llama.block_count' is 0")
    missing = os.fsdecode(folder + b"/missing-\xfd.gguf")
    result, _ = tandem(home, "generate", "--target", os.fsencode(missing), "--prompt", PROMPT)
    assert "missing-\\xfd.gguf: does not exist" in error_line(result)


@pytest.mark.parametrize("name", list(CASES))
def test_fit_plans_or_refuses_in_one_line(home, honest, tmp_path, name):
    """``tandem fit`` reads only the header: a file the header check refuses is one line;
    one only a trial load catches (fit loads nothing) is planned, never a traceback."""
    spec, reason = CASES[name]
    path = write_model(tmp_path / f"{name}.gguf", spec)
    result, seconds = tandem(home, "fit", str(path), str(honest), "--gpu-memory", "1GiB")
    assert seconds < LIMIT_S and b"Traceback" not in result.stderr
    if name in TRIAL_ONLY:
        assert result.returncode in (0, 1) and result.stdout.strip(), result.stderr
    else:
        line = error_line(result)
        assert f"{name}.gguf: " in line and reason in line, line
