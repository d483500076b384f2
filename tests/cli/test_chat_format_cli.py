"""The chat format on the command line: a Gemma 3 without a template chats in Gemma's
format and says so once (generate, chat, serve); --chat-format and the format the
window remembers for the file take over; a name llama.cpp does not know is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chat_format_models import write_gemma3
from server.live_server import LiveServer

from app.backends.llama.vocabulary import LlamaVocab
from app.engine.prompting import chat_formats
from app.engine.prompting.chat import build_messages, chat_prompt

ROOT = Path(__file__).resolve().parents[2]
NOTICE = "no chat template in the file; using llama.cpp's 'gemma' format"


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    return write_gemma3(tmp_path_factory.mktemp("gemma") / "gemma-3-tiny.gguf")


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tandem-home")


def tandem(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, input=stdin,
                          timeout=300, env=env, cwd=ROOT)


def prompt_length(model: Path, name: str | None, text: str = "hi") -> int:
    """Tokens of the one-message prompt in format ``name`` (None: the default choice)."""
    vocab = LlamaVocab(model)
    try:
        if name is not None:
            chat_formats.set_format(vocab, chat_formats.choose_format(vocab, name))
        return len(chat_prompt(vocab, build_messages([("user", text)])).tokens)
    finally:
        vocab.close()


def generate(home: Path, model: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    result = tandem(home, "generate", "--target", str(model), "--prompt", "hi", "--max-tokens", "2",
                    "--no-speculation", "--json", *extra)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result, json.loads(result.stdout.strip().splitlines()[-1])["stats"]


def format_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if "format" in line]


def test_generate_names_the_format_once_and_prompts_in_it(home, gemma):
    result, stats = generate(home, gemma)
    assert format_lines(result) == [f"tandem: {gemma.name}: {NOTICE}"]
    assert stats["prompt_tokens"] == prompt_length(gemma, "gemma")
    assert stats["prompt_notice"] == ""  # said at load, not again with each reply


def test_chat_format_option_chooses_another(home, gemma):
    result, stats = generate(home, gemma, "--chat-format", "llama3")
    assert format_lines(result) == ["tandem: chat format: llama.cpp's 'llama3' (chosen for this model)"]
    assert stats["prompt_tokens"] == prompt_length(gemma, "llama3") != prompt_length(gemma, "gemma")


def test_the_format_remembered_for_the_file_applies_and_the_option_wins(tmp_path, gemma):
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "settings.json").write_text(json.dumps(
        {"version": 1, "settings": {"chat_formats": [[str(gemma.resolve()), "zephyr"]]}}))
    result, stats = generate(home, gemma)
    assert format_lines(result) == ["tandem: chat format: llama.cpp's 'zephyr' (chosen for this model)"]
    assert stats["prompt_tokens"] == prompt_length(gemma, "zephyr")
    result, stats = generate(home, gemma, "--chat-format", "file")  # the file's own: it has none
    assert format_lines(result) == [f"tandem: {gemma.name}: {NOTICE}"]


def test_an_unknown_format_is_one_line_naming_the_choices(home, gemma):
    result = tandem(home, "generate", "--target", str(gemma), "--prompt", "hi", "--chat-format", "gemmma")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(errors) == 1, result.stderr
    assert "'gemmma' is not one of llama.cpp's chat formats" in errors[0] and "gemma, " in errors[0]


def test_chat_format_list_names_llama_cpps_formats(home):
    result = tandem(home, "generate", "--prompt", "hi", "--chat-format", "list")
    assert result.returncode == 0, result.stderr
    names = result.stdout.split()
    assert {"gemma", "llama3", "mistral-v7", "chatml", "deepseek3"} <= set(names) and names == sorted(names)
    assert "Loading" not in result.stderr  # answered before any model is read


def test_chat_says_it_once(home, gemma):
    result = tandem(home, "chat", "--target", str(gemma), "--max-tokens", "2", "--no-speculation",
                    stdin="hi\nagain\n\n")
    assert result.returncode == 0, result.stderr
    assert format_lines(result) == [f"tandem: {gemma.name}: {NOTICE}"]


def test_serve_says_it_once_and_serves_in_that_format(home, gemma, monkeypatch):
    from openai import OpenAI

    monkeypatch.setenv("TANDEM_HOME", str(home))
    server = LiveServer("--target", str(gemma), "--no-speculation")
    try:
        client = OpenAI(base_url=server.base_url, api_key="unused")
        reply = client.chat.completions.create(model="tandem", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=2)
        assert reply.usage.prompt_tokens == prompt_length(gemma, "gemma")
    finally:
        assert server.stop() == 0
    assert [line.rstrip("\n") for line in server.stderr if "format" in line] == [f"tandem: {gemma.name}: {NOTICE}"]
