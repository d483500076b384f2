"""``tandem chat`` in a terminal outlives its engine: llama.cpp runs in an engine process;
when that dies mid-reply (a test-only hook calls ``os.abort()`` in it, as a GGML_ASSERT
does) the chat says so in one line, offers a restart, and the next reply works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.session import protocol

ROOT = Path(__file__).resolve().parents[2]


def chat(demo_models, tmp_path, stdin: str, **hooks: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(tmp_path / "home"), **hooks)
    return subprocess.run([sys.executable, "-m", "app", "-m", str(demo_models.target), "-md", str(demo_models.draft),
                           "-c", "1024", "chat", "--max-tokens", "8"],
                          input=stdin, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_a_dead_engine_is_one_line_and_a_restart_answers_the_next_message(demo_models, tmp_path):
    once = tmp_path / "aborted"
    done = chat(demo_models, tmp_path, "Hi\ny\nHello again\n\n",
                **{protocol.TEST_HOOKS: "1", protocol.TEST_ABORT_AFTER: "2", protocol.TEST_ONCE: str(once)})
    assert done.returncode == 0, done.stderr
    assert once.exists()  # the engine did abort
    assert "Traceback" not in done.stderr
    deaths = [line for line in done.stderr.splitlines() if line.startswith("tandem: The engine crashed")]
    assert deaths == ["tandem: The engine crashed (SIGABRT: tandem test hook: abort after 2 tokens); "
                      "the reply was interrupted, the chat is kept."]
    assert done.stdout.count("Restart the engine? [Y/n]") == 1
    # The second reply ran to its end in the fresh engine: its summary line.
    assert sum(line.startswith("[") and "tokens" in line for line in done.stderr.splitlines()) == 1


def test_no_restart_ends_the_chat(demo_models, tmp_path):
    done = chat(demo_models, tmp_path, "Hi\nn\n", **{protocol.TEST_HOOKS: "1", protocol.TEST_ABORT_AFTER: "1"})
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert "tandem: The engine crashed (SIGABRT" in done.stderr


def test_the_hooks_do_nothing_without_the_test_switch(demo_models, tmp_path):
    done = chat(demo_models, tmp_path, "Hi\n\n", **{protocol.TEST_ABORT_AFTER: "1"})
    assert done.returncode == 0 and "crashed" not in done.stderr
    assert sum(line.startswith("[") and "tokens" in line for line in done.stderr.splitlines()) == 1
