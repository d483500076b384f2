"""``tandem search``, ``tandem fit hf://...`` and ``tandem pull`` against a local Hub, and
each of them with the Hub down: one line and a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hub.conftest import DEMO_REPO, DRAFT, TARGET

ROOT = Path(__file__).resolve().parents[2]


def tandem(*args: str, timeout: float = 300, **env_changes: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_changes)
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def test_search_lists_the_repository_with_its_files(hub):
    result = tandem("search", "smollm")
    assert result.returncode == 0, result.stderr
    assert DEMO_REPO in result.stdout
    assert "Q4_1" in result.stdout and "F32" in result.stdout and "98.4 MB" in result.stdout
    listed = json.loads(tandem("search", "smollm", "--json").stdout)
    [repo] = listed["repositories"]
    assert {f["quant"] for f in repo["files"]} == {"Q4_1", "F32"}
    assert tandem("search", "no-such-model-anywhere").stdout.strip().startswith("No GGUF repository")


def test_fit_plans_hub_files_as_it_plans_the_downloaded_ones(hub, demo_models):
    remote = tandem("fit", f"hf://{DEMO_REPO}/{TARGET}", f"hf://{DEMO_REPO}/{DRAFT}", "--json",
                    "--gpu-memory", "600MiB")
    local = tandem("fit", str(demo_models.target), str(demo_models.draft), "--json", "--gpu-memory", "600MiB")
    assert remote.returncode == local.returncode == 0, remote.stderr
    r, l = json.loads(remote.stdout), json.loads(local.stdout)
    for role in ("target", "draft"):
        for key in ("bytes", "parts", "layers", "gpu_layers", "gpu_bytes", "n_ctx", "flash_attn"):
            assert r[role][key] == l[role][key], (role, key)
    assert r["compatible"] is True
    assert r["download_bytes"] == demo_models.target.stat().st_size + demo_models.draft.stat().st_size
    assert r["header_bytes"] < 8 << 20
    text = tandem("fit", f"hf://{DEMO_REPO}/{TARGET}", f"hf://{DEMO_REPO}/{DRAFT}").stdout
    assert "Download: 0.64 GB" in text and "Pair: " in text


def test_pull_downloads_a_verified_pair_that_loads_by_name(hub, tmp_path):
    home = tmp_path / "tandem-home"
    result = tandem("-v", "pull", f"{DEMO_REPO}:F32", "--draft", f"{DEMO_REPO}:Q4_1", TANDEM_HOME=str(home))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("verified against the Hub's sha256") == 2
    command = result.stdout.strip().splitlines()[-1]
    assert command == f"Chat with it: tandem chat --target {DEMO_REPO}/{TARGET} --draft {DEMO_REPO}/{DRAFT}"
    run = tandem("generate", "--target", f"{DEMO_REPO}/{TARGET}", "--draft", f"{DEMO_REPO}/{DRAFT}",
                 "--prompt", "Say hi", "--max-tokens", "8", "--temperature", "0", "--json")
    assert run.returncode == 0, run.stderr
    reply = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(reply["tokens"]) == 8
    assert any(t["kind"] in ("accepted", "bonus") for t in reply["tokens"])  # the pulled draft drafted
    again = tandem("pull", f"{DEMO_REPO}:Q4_1", "--no-draft")
    assert "already here" in again.stdout
    # The token went to the Hub, and nowhere Tandem writes.
    assert hub.authorized
    token = os.environ["HF_TOKEN"].encode()
    written = [p for p in home.rglob("*") if p.is_file()]
    assert written and not [p for p in written if token in p.read_bytes()]


def test_pull_plans_the_quantisation_that_fits(hub):
    result = tandem("pull", DEMO_REPO, "--plan-only", "--no-draft", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["target"]["file"].endswith(DRAFT)  # the largest quantised file; F32 is a float
    assert plan["fits"] is True and plan["download_bytes"] == plan["target"]["bytes"]


def test_a_hub_file_not_downloaded_says_how_to_get_it(hub):
    result = tandem("generate", "--target", f"hf://{DEMO_REPO}/{TARGET}", "--prompt", "hi")
    assert result.returncode == 2
    assert f"tandem pull hf://{DEMO_REPO}/{TARGET}" in result.stderr


@pytest.mark.parametrize("args", [["search", "smollm"], ["fit", f"hf://{DEMO_REPO}/{TARGET}"],
                                  ["pull", DEMO_REPO], ["pull", f"hf://{DEMO_REPO}/{DRAFT}"]])
def test_with_the_hub_down_each_command_is_one_line(hub, args):
    hub.stop()
    started = time.monotonic()
    result = tandem(*args)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tandem: error:") and "cannot reach" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60  # no half-minute of retries against a refused connection


def test_offline_mode_is_one_line(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = tandem("search", "smollm")
    assert result.returncode == 1 and "HF_HUB_OFFLINE" in result.stderr
    assert hub.requests == []


def test_the_real_hub_out_of_reach_is_one_line(monkeypatch):
    """The real endpoint (no HF_ENDPOINT) behind a proxy that refuses: what a machine
    without the internet sees, whatever this one has."""
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    for args in (["search", "qwen"], ["pull", "Qwen/Qwen2.5-0.5B-Instruct-GGUF"]):
        result = tandem(*args, timeout=120)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 1 and len(lines) == 1, result.stderr
        assert "cannot reach https://huggingface.co" in lines[0]
