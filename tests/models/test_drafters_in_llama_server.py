"""The generated drafters in llama.cpp's own speculative decoding: llama-server with a
Gemma 4 target and its assistant (``--spec-type draft-mtp``), and with a DFlash drafter
(``--spec-type draft-dflash``), writes the target's own greedy text and accepts a fair
share of the drafts (its ``timings``: ``draft_n``, ``draft_n_accepted``). Needs a
llama-server built from the vendored llama.cpp, named by TANDEM_LLAMA_SERVER; without it
these tests skip."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from dflash_models import write_dflash_drafter
from gemma4_models import GEMMA4_QUIET, write_gemma4_assistant, write_gemma4_model

SERVER = os.environ.get("TANDEM_LLAMA_SERVER", "")
pytestmark = pytest.mark.skipif(not SERVER, reason="no llama-server: set TANDEM_LLAMA_SERVER to run these")
PROMPTS = ["Once upon a time", "Tell me about dragons and knights in a long story"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _complete(target: Path, *extra: str) -> list[dict]:
    """Greedy 32 tokens for each prompt from a llama-server on ``target`` (``extra``: its
    speculative options); the replies as llama-server gives them."""
    port = _free_port()
    log = open(target.parent / f"server-{port}.log", "w")
    proc = subprocess.Popen([SERVER, "-m", str(target), *extra, "-c", "512", "-np", "1", "-t", "1",
                             "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (target.parent / f"server-{port}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "llama-server did not come up"
            time.sleep(0.2)
        replies = []
        for prompt in PROMPTS:
            body = json.dumps({"prompt": prompt, "n_predict": 32, "temperature": 0, "cache_prompt": False}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body,
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                replies.append(json.load(r))
        return replies
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def files(demo_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("server-drafters")
    target = write_gemma4_model(folder / "gemma4-quiet.gguf", vocab_from=demo_models.draft, **GEMMA4_QUIET)
    return {"target": target, "plain": _complete(target),
            "assistant": write_gemma4_assistant(target, folder / "assistant.gguf"),
            "dflash": write_dflash_drafter(target, folder / "dflash.gguf")}


@pytest.mark.parametrize(("drafter", "spec_type"), [("assistant", "draft-mtp"), ("dflash", "draft-dflash")])
def test_llama_server_speculates_with_it_and_keeps_a_fair_share(files, drafter, spec_type):
    replies = _complete(files["target"], "-md", str(files[drafter]), "--spec-type", spec_type)
    drafted = sum(r["timings"].get("draft_n", 0) for r in replies)
    accepted = sum(r["timings"].get("draft_n_accepted", 0) for r in replies)
    assert [r["content"] for r in replies] == [r["content"] for r in files["plain"]]  # the target's own text
    assert drafted > 0 and 0.25 <= accepted / drafted <= 0.95, (accepted, drafted)
