"""Recurrent and hybrid targets never fail and stay lossless (docs/recurrent-models.md).

One architecture of each class: Mamba (recurrent, no snapshots), LFM2 (hybrid, llama.cpp's
``n_rs_seq`` snapshots) and Granite 4.0-H (hybrid, none); each target drafted for by its
own Q4_0 copy (a recurrent draft as well). Every path that reuses a cached prefix goes
through ``SpeculativeEngine._prefill`` -> ``trim``: a new turn, a regenerate, an edited
earlier message, two prompts in one process, two server requests. Each must give the
token ids a fresh process decoding the same prompt plainly gives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as scistats

from app.backends.llama.builtin_chat_formats import render_chat_format
from app.backends.loader import load_pair
from app.engine.types import SamplingConfig, SpecConfig

ROOT = Path(__file__).resolve().parents[3]
ARCHS = ["mamba", "lfm2", "granitehybrid"]
GREEDY = SamplingConfig(temperature=0.0, ignore_eos=True)


def tandem(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)


def generated_ids(result: subprocess.CompletedProcess) -> list[list[int]]:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return [[t["id"] for t in json.loads(line)["tokens"]] for line in result.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_speculative_equals_plain(recurrent_pairs, arch, tmp_path):
    """``tandem generate``, greedy: plain, a fixed chain length, auto; and two prompts in
    one process (``--prompts``, sharing the chat template's prefix), each as a fresh run."""
    target, draft = recurrent_pairs[arch]
    common = ["--target", str(target), "--json", "-n", "24", "--ignore-eos", "--temperature", "0"]
    prompts = ["Tell me a story about a fox.", "Tell me a story about a bear and a river."]
    fresh = [generated_ids(tandem("generate", *common, "--no-speculation", "-p", p))[0] for p in prompts]
    for mode in (["--draft", str(draft), "--draft-max", "4"], ["--draft", str(draft), "--draft-max", "auto"]):
        assert generated_ids(tandem("generate", *common, *mode, "-p", prompts[0]))[0] == fresh[0], mode
    lines = tmp_path / "prompts.jsonl"
    lines.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts + prompts[:1]))
    for mode in (["--no-speculation"], ["--draft", str(draft), "--draft-max", "auto"]):
        assert generated_ids(tandem("generate", *common, *mode, "--prompts", str(lines))) == fresh + fresh[:1], mode


def test_check_pair_names_the_memory(recurrent_pairs):
    target, draft = recurrent_pairs["granitehybrid"]
    result = tandem("check-pair", str(target), str(draft))
    assert result.returncode == 0, result.stderr
    assert "hybrid model (attention + recurrent state): speculation rolls back by checkpoints" in result.stdout
    assert "token trees off" in result.stdout
    info = json.loads(tandem("check-pair", str(target), str(draft), "--json").stdout)
    assert info["memory"]["target"]["kind"] == "hybrid"


def _chat_prompt(model, messages: list[dict]) -> list[int]:
    return model.tokenize(render_chat_format("chatml", messages), add_special=True, parse_special=True)


def _ids(engine, prompt, spec: SpecConfig, n: int = 16) -> list[int]:
    return [e.id for e in engine.generate(prompt, GREEDY, spec, max_tokens=n)]


@pytest.mark.parametrize("arch", ARCHS)
def test_chat_turns_regenerate_and_edit_reuse_the_cache_exactly(recurrent_pairs, arch):
    """Three turns, a regenerate and an edited first message in one engine (as ``chat``,
    ``serve`` and the window keep theirs), speculative; each reply as a fresh engine's
    plain decode of the same prompt."""
    target, draft = recurrent_pairs[arch]
    pair = load_pair(target, draft, n_ctx=1024, n_threads=2)
    fresh = load_pair(target, None, n_ctx=1024, n_threads=2)
    spec = SpecConfig(draft_max="auto")
    try:
        messages: list[dict] = []
        prompts = []
        for text in ("Hello there.", "Tell me about rivers.", "And mountains?"):
            messages.append({"role": "user", "content": text})
            prompt = _chat_prompt(pair.target, messages)
            reply = _ids(pair.engine, prompt, spec)
            fresh.target.trim(0)
            assert reply == _ids(fresh.engine, prompt, SpecConfig(enabled=False)), f"turn {len(prompts) + 1}"
            prompts.append(prompt)
            messages.append({"role": "assistant", "content": "".join(pair.target.token_text(t) for t in reply)})
        # Regenerate the last reply: the same prompt, the cache holds it and the reply.
        assert _ids(pair.engine, prompts[-1], spec) == _ids(fresh.engine, prompts[-1], SpecConfig(enabled=False))
        # An edited first message: the cache matches only the template's opening.
        edited = [{"role": "user", "content": "Hello again."}, *messages[1:-1]]
        prompt = _chat_prompt(pair.target, edited)
        fresh.target.trim(0)
        assert _ids(pair.engine, prompt, spec) == _ids(fresh.engine, prompt, SpecConfig(enabled=False))
        rollbacks = pair.target.rollbacks
        assert rollbacks["restored"] + rollbacks["native"] > 0, rollbacks  # it did roll back
    finally:
        pair.close()
        fresh.close()


def test_two_server_requests_sharing_a_prefix(recurrent_pairs):
    """``tandem serve`` on a hybrid pair: two chat requests sharing the system message and
    the first turn; each as a fresh plain ``generate`` of the same conversation."""
    from openai import OpenAI

    from server.live_server import LiveServer

    target, draft = recurrent_pairs["granitehybrid"]
    server = LiveServer("--target", str(target), "--draft", str(draft), "--ctx-size", "1024")
    try:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="x")
        first = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a river."}]
        second = [*first, {"role": "assistant", "content": "The Nile."}, {"role": "user", "content": "Another?"}]
        texts = []
        for messages in (first, second, first):
            reply = client.chat.completions.create(model="tandem", messages=messages, max_tokens=12,
                                                   temperature=0, extra_body={"ignore_eos": True})
            texts.append(reply.choices[0].message.content)
    finally:
        server.stop()
    assert texts[0] == texts[2]  # back to the shorter prompt: a rollback, the same reply
    pair = load_pair(target, None, n_ctx=1024, n_threads=2)
    try:
        for messages, text in zip((first, second), texts):
            prompt = _chat_prompt(pair.target, messages)
            pair.target.trim(0)
            ids = _ids(pair.engine, prompt, SpecConfig(enabled=False), 12)
            assert "".join(pair.target.token_bytes(t).decode("utf-8", "replace") for t in ids) == text
    finally:
        pair.close()


def test_sampled_speculation_on_a_hybrid_keeps_the_target_distribution(recurrent_pairs):
    """Temperature 1 on LFM2 drafted by its Q4_0 copy: the first three tokens' joint
    distribution with speculation equals plain decoding's (two-sample chi-square), through
    rollbacks by llama.cpp's snapshots (the first token is the prompt's own; the second
    round drafts)."""
    target, draft = recurrent_pairs["lfm2"]
    pair = load_pair(target, draft, n_ctx=256, n_threads=2)
    try:
        prompt = _chat_prompt(pair.target, [{"role": "user", "content": "Hi"}])
        counts = {True: Counter(), False: Counter()}
        n = 300
        for speculate in (True, False):
            for seed in range(n):
                sampling = SamplingConfig(temperature=1.0, top_k=4, seed=seed, ignore_eos=True)
                events = pair.engine.generate(prompt, sampling, SpecConfig(enabled=speculate, draft_max=3),
                                              max_tokens=3)
                counts[speculate][tuple(e.id for e in events)] += 1
        assert pair.target.rollbacks["native"] > 0  # rejected drafts were rolled back
    finally:
        pair.close()
    keys = sorted(set(counts[True]) | set(counts[False]))
    table = np.array([[counts[s][k] for k in keys] for s in (True, False)])
    table = table[:, table.sum(axis=0) >= 10] if (table.sum(axis=0) >= 10).sum() >= 2 else table
    assert scistats.chi2_contingency(table).pvalue > 1e-3
