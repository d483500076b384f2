"""Making a draft from the target, on the real demo models: written by llama.cpp in a
child process, checked like any other file, remembered per target, loaded as a draft;
lossless; a cancel and a full disk leave nothing behind; refusals are one line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.backends.draft_maker import DraftCancelled, make_draft
from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.gguf.meta import read_metadata
from app.engine.speculation.self_draft import SelfDraftError, plan_draft
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig
from app.storage import made_drafts, paths

ROOT = Path(__file__).resolve().parents[2]
from engine.speculation.test_self_draft import write_model  # noqa: E402

GREEDY = SamplingConfig(temperature=0.0, ignore_eos=True)
PROMPTS = ["Explain how a hash map works.", "Write a haiku about autumn."]
N_TOKENS = 32


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def tandem(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def test_make_draft_on_the_demo_target_checks_remembers_and_loads(demo_models, home):
    first = tandem("make-draft", str(demo_models.target), home=home)
    assert first.returncode == 0, first.stderr
    made = Path(first.stdout.strip().splitlines()[-1])
    assert made.parent == home / "data" / "drafts" and made.is_file()
    assert "needs up to" in first.stderr and "MB of disk space" in first.stderr  # said before
    assert "Traceback" not in first.stderr
    assert not list(made.parent.glob("*.part"))
    meta = read_metadata(made)
    assert meta.file_type_name == "Q4_K_M" and meta.architecture == "llama"  # the default for an F32 target
    remembered = made_drafts.made_for(demo_models.target)
    assert [d.draft for d in remembered] == [str(made)] and remembered[0].variant == "Q4_K_M"
    pair = tandem("check-pair", str(demo_models.target), str(made), "--json", home=home)
    assert pair.returncode == 0 and json.loads(pair.stdout)["compatible"] is True
    again = tandem("make-draft", str(demo_models.target), home=home)
    assert again.returncode == 0 and again.stdout.strip() == str(made) and "Already made" in again.stderr

    from app.backends.loader import load_pair

    loaded = load_pair(demo_models.target, made, n_ctx=512)
    try:
        assert loaded.engine.drafter is not None and loaded.compatibility.ok
        tokens = chat_tokens(loaded.target, build_messages([("user", PROMPTS[0])]))
        generation = loaded.engine.generate(tokens, GREEDY, SpecConfig(draft_max=4), 16)
        assert len(generation.run()) == 16 and generation.stats.accepted > 0
    finally:
        loaded.close()


def test_pruned_draft_of_the_llama_arch_demo_keeps_its_first_layers(demo_models, home):
    plan = plan_draft(demo_models.target, "Q4_0", layers=12)
    seen: list[float] = []
    result = make_draft(plan, progress=lambda fraction, stage: seen.append(fraction))
    assert seen == sorted(seen) and 0 < max(seen) <= 1.0
    assert result.path.stat().st_size < plan.bytes_needed  # the estimate said enough
    from app.engine.gguf.header import scan_header

    _, values = scan_header(result.path, lambda key: key == "llama.block_count")
    assert values["llama.block_count"] == 12
    assert made_drafts.find_made(demo_models.target, "Q4_0", 12).draft == str(result.path)


def test_greedy_output_with_self_made_drafts_is_the_target_alone(demo_models, home, q41_target):
    """A quantised target (batch-invariant logits: exact ids) checked by drafts made from it,
    full depth and cut to its first 16 layers (a weak draft: many corrections)."""
    from app.backends.llama.backend import LlamaBackend
    from app.engine.speculation.drafters import ModelDrafter

    plain = {}
    for prompt in PROMPTS:
        tokens = chat_tokens(q41_target, build_messages([("user", prompt)]))
        plain[prompt] = [e.id for e in SpeculativeEngine(q41_target).generate(
            tokens, GREEDY, SpecConfig(enabled=False), N_TOKENS)]
    for layers in (None, 16):
        made = make_draft(plan_draft(demo_models.draft, "Q4_0", layers=layers))
        draft = LlamaBackend(made.path, n_ctx=2048, exact_batches=False)
        try:
            engine = SpeculativeEngine(q41_target, ModelDrafter(draft, q41_target.n_vocab,
                                                                eog_ids=q41_target.eog_ids))
            drafted = 0
            for prompt in PROMPTS:
                tokens = chat_tokens(q41_target, build_messages([("user", prompt)]))
                generation = engine.generate(tokens, GREEDY, SpecConfig(draft_max=4), N_TOKENS)
                assert [e.id for e in generation] == plain[prompt], (layers, prompt)
                drafted += generation.stats.drafted
            assert drafted > 0
        finally:
            draft.close()


def test_cancel_kills_the_writer_and_removes_the_partial_file(demo_models, home):
    plan = plan_draft(demo_models.target, "Q8_0")
    partial = paths.drafts_dir() / (plan.file_name() + ".part")
    # Cancelled once the child has started writing (its file exists); never later than the end.
    with pytest.raises(DraftCancelled):
        make_draft(plan, progress=lambda fraction, stage: not partial.exists())
    assert not partial.exists()
    assert not (paths.drafts_dir() / plan.file_name()).exists()
    assert made_drafts.made_for(demo_models.target) == []


def test_a_disk_without_the_room_is_refused_before_anything_is_written(demo_models, home):
    plan = dataclasses.replace(plan_draft(demo_models.target), bytes_needed=1 << 60)
    with pytest.raises(SelfDraftError) as caught:
        make_draft(plan)
    message = str(caught.value)
    assert message.startswith("Not enough disk space") and "\n" not in message and "free" in message
    assert list(paths.drafts_dir().iterdir()) == []


def test_refusals_on_the_command_line_are_one_line(tmp_path, home):
    gemma = write_model(tmp_path / "gemma.gguf", arch="gemma3")
    for args, needle in (
        (["--layers", "2"], "cannot be cut from a gemma3 model"),
        (["--variant", "IQ2_XXS"], "needs an importance matrix"),
    ):
        result = tandem("make-draft", str(gemma), *args, home=home, timeout=120)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("tandem: error:")]
        assert len(errors) == 1 and needle in errors[0], result.stderr
    missing = tandem("make-draft", str(tmp_path / "nothing.gguf"), home=home, timeout=120)
    assert missing.returncode == 1 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
