"""Gated delta nets (Qwen 3.5, Qwen3-Next ...) whose value heads are not a whole multiple
of their key heads: refused by the validator in one line, before llama.cpp's
``GGML_ASSERT(H_v % H_k == 0)`` (delta-net-base.cpp) can abort the process at the first
decode. Real files written by tests/recurrent_models.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recurrent_models import Shape, write_recurrent_model

from app.engine.errors import ModelFileError
from app.engine.gguf.rules import DELTA_NET_ARCHS, first_violation
from app.engine.gguf.memory_kinds import HYBRID
from app.engine.gguf.model_file import open_model_file

ROOT = Path(__file__).resolve().parents[3]


def _heads(arch: str, k: int, v: int) -> dict:
    return {"general.architecture": arch, f"{arch}.ssm.group_count": k, f"{arch}.ssm.time_step_rank": v}


@pytest.mark.parametrize("arch", DELTA_NET_ARCHS)
def test_value_heads_must_be_a_whole_multiple_of_key_heads(arch):
    assert first_violation(_heads(arch, 2, 4), 32) is None
    assert first_violation(_heads(arch, 4, 4), 32) is None
    for k, v in ((2, 3), (4, 2), (0, 4), (2, 0)):
        reason = first_violation(_heads(arch, k, v), 32)
        assert reason and "H_v % H_k" in reason and f"{v} value heads" in reason, (k, v, reason)
    # Other architectures read these keys otherwise (Mamba-2's groups divide its heads' inner size).
    assert first_violation(_heads("mamba2", 3, 4), 32) is None


def _lopsided_qwen35(path: Path, vocab_from: Path, monkeypatch) -> Path:
    """A Qwen 3.5 whose tensors agree with 3 key heads and 4 value heads: llama.cpp loads it
    and would abort at the first decode. The generator refuses such a shape, so its check is
    set aside here."""
    monkeypatch.setattr(Shape, "__post_init__", lambda self: None)
    return write_recurrent_model(path, "qwen35", vocab_from=vocab_from, ssm_groups=3, ssm_heads=8)


def test_a_qwen35_file_with_lopsided_heads_is_refused_in_one_line(demo_models, tmp_path, monkeypatch):
    honest = open_model_file(write_recurrent_model(tmp_path / "honest.gguf", "qwen35", vocab_from=demo_models.draft))
    assert honest.memory_kind == HYBRID and honest.architecture == "qwen35" and honest.n_layers == Shape().n_layer

    path = _lopsided_qwen35(tmp_path / "lopsided.gguf", demo_models.draft, monkeypatch)
    with pytest.raises(ModelFileError) as info:
        open_model_file(path)
    assert str(info.value).startswith("lopsided.gguf: its 4 value heads") and "\n" not in str(info.value)

    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(tmp_path / "home"))
    result = subprocess.run([sys.executable, "-m", "app", "generate", "--target", str(path), "--prompt", "hi",
                             "--max-tokens", "2", "--no-speculation"], capture_output=True, text=True,
                            timeout=120, env=env, cwd=ROOT)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(errors) == 1 and "GGML_ASSERT H_v % H_k == 0" in errors[0], result.stderr
