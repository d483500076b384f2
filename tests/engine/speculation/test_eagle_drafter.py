"""Drafting with an EAGLE-3 drafter file (``EagleDrafter`` over ``EagleHead``), which reads
three of its target's layers: on a tiny random-weight qwen35 target (a hybrid: chains,
rollback by the exact trim) and a drafter built to agree with it part of the time
(tests/eagle_models.py). Lossless greedy over turns and a regenerate, sampled tokens
distributed as the target's, hostile drafter files refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.backends.llama.backend import LlamaBackend
from app.backends.loader import load_pair
from app.engine.gguf.meta import read_metadata
from app.engine.speculation.drafters import EagleDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import DrafterKind, SamplingConfig, SpecConfig

from eagle_models import write_eagle3_drafter
from head_checks import corrected_tokens_carry_proposals, greedy_over_turns, ids, long_prompt, sampled_first_token
from recurrent_models import MTP_SHAPE, write_recurrent_model

ROOT = Path(__file__).resolve().parents[3]
QUIET = {key: value for key, value in MTP_SHAPE.items() if key != "nextn"}  # the trunk MTP_SHAPE makes


@pytest.fixture(scope="module")
def files(mtp_models, demo_models, tmp_path_factory):
    """{name: path}: the qwen35 MTP target with a drafter reading its first, middle and
    last (normed) rows; a qwen35 target without MTP and a drafter reading inner layers."""
    folder = tmp_path_factory.mktemp("eagle3")
    target = mtp_models["qwen35"]
    bare = write_recurrent_model(folder / "qwen35.gguf", "qwen35", vocab_from=demo_models.draft, **QUIET)
    return {"target": target, "drafter": write_eagle3_drafter(target, folder / "eagle3.gguf"),
            "bare": bare, "inner": write_eagle3_drafter(bare, folder / "inner.gguf", layers=(0, 1, 3))}


def _open(path) -> LlamaBackend:
    return LlamaBackend(path, n_ctx=1024, n_threads=1)  # one thread: results depend on the batch alone


@pytest.fixture(scope="module", params=[("target", "drafter"), ("bare", "inner")], ids=["last-row", "inner-layers"])
def engines(request, files):
    target_name, drafter_name = request.param
    target, plain = _open(files[target_name]), _open(files[target_name])
    layers = read_metadata(files[drafter_name]).eagle3_layers
    head = target.eagle_head(files[drafter_name], layers)
    spec = SpeculativeEngine(target, EagleDrafter(head, target.n_vocab, eog_ids=target.eog_ids))
    yield spec, SpeculativeEngine(plain), head
    target.close()
    plain.close()


@pytest.mark.parametrize("draft_max", [4, "auto"])
def test_greedy_equals_the_target_alone_over_turns_and_a_regenerate(engines, draft_max):
    spec, plain, head = engines
    drafted, accepted = greedy_over_turns(spec, plain, draft_max, DrafterKind.EAGLE3.value)
    if draft_max != "auto":  # auto may stop drafting where it does not pay
        assert drafted > 30 and 0.05 < accepted / drafted < 0.95, (drafted, accepted)
    assert head.blind_steps == 0  # every entry read a row: the target's, or the drafter's own


def test_a_prompt_longer_than_a_batch_goes_through_the_encoder_in_batches(engines):
    spec, plain, head = engines
    assert long_prompt(spec, plain) > 0


def test_corrected_tokens_carry_what_the_drafter_proposed(engines):
    spec, plain, head = engines
    corrected_tokens_carry_proposals(spec)


def test_sampled_tokens_follow_the_target_not_the_drafter(engines):
    """Rejection sampling with the drafter's warped logits as q: the first token of a
    reply is distributed as the target's own (chi-square), not as the drafter's."""
    spec, plain, head = engines
    target_p, drafter_p, support = sampled_first_token(spec, plain)
    assert support >= 3, "the prompt should give a spread of tokens"
    assert target_p > 1e-3
    assert drafter_p < 1e-6


def test_load_pair_drafts_with_a_named_eagle3_file(files):
    pair = load_pair(files["target"], files["drafter"], n_ctx=512, n_threads=1)
    try:
        assert isinstance(pair.engine.drafter, EagleDrafter) and pair.engine.note == ""
        assert pair.engine.drafter.model.name.endswith("(its EAGLE-3 drafter)")
        prompt = pair.target.tokenize("Hello there,", add_special=True, parse_special=False)
        g = pair.engine.generate(prompt, SamplingConfig(), SpecConfig(draft_max=3), max_tokens=24)
        assert len(ids(g)) == 24 and g.stats.drafted > 0
    finally:
        pair.close()


def _check_pair(target: Path, draft: Path) -> tuple[int, dict]:
    out = subprocess.run([sys.executable, "-m", "app", "check-pair", str(target), str(draft), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    return out.returncode, json.loads(out.stdout)


def test_check_pair_names_the_layers_the_drafter_reads(files):
    code, said = _check_pair(files["target"], files["drafter"])
    layers = ", ".join(map(str, read_metadata(files["drafter"]).eagle3_layers))
    assert code == 0 and said["compatible"] and said["reads_target"] and said["drafter"] == "eagle3"
    assert said["reason"] == (f"Draft is an EAGLE-3 drafter for this target: it reads the target's layers {layers} "
                              "and drafts from them.")


def test_the_bench_runs_the_drafter_file_as_the_kind_it_declares(files):
    """``bench --method eagle3``: the file given, chosen as users choose it (a draft model)."""
    import argparse

    from app.bench import methods as bench_methods

    args = argparse.Namespace(method="eagle3", drafter="lookup", draft=files["drafter"])
    said = bench_methods.prepare(args, lambda *a: None)
    assert said == "eagle3: an EAGLE-3 drafter named with --draft (eagle3.gguf)" and args.drafter == "model"


@pytest.mark.parametrize("layers, keys, width, why", [
    ((0, 1), {}, None, "its eagle3.target_layers names 2 layers, not 3"),
    ((0, 1, 9), {}, None, "it reads layer 9, and the target has 4"),
    ((0, 1, 2), {"target_hidden_size": 96}, None, "it reads rows 96 wide, and the target's are 64 wide"),
    # llama.cpp would run the target's 64-wide embedding into its 96-wide norms and abort
    ((0, 1, 2), {}, 96, "it takes the target's token embedding and output matrix, yet its own rows are 96 "
                        "wide and the target's 64"),
])
def test_a_drafter_that_does_not_fit_its_target_is_refused_in_one_line(files, tmp_path, layers, keys, width, why):
    drafter = write_eagle3_drafter(files["bare"], tmp_path / "bad.gguf", layers=layers, keys=keys, width=width)
    code, said = _check_pair(files["bare"], drafter)
    assert code == 1 and not said["compatible"] and said["rule"] == "eagle3"
    assert said["reason"] == f"Draft is an EAGLE-3 drafter that cannot draft for this target: {why}."
    pair = load_pair(files["bare"], drafter, n_ctx=256, n_threads=1)  # plain, saying why
    try:
        assert pair.engine.drafter is None and why in pair.engine.note
    finally:
        pair.close()


def test_a_target_that_hands_out_no_layer_inputs_is_refused_in_one_line(files, demo_models, tmp_path):
    mamba = write_recurrent_model(tmp_path / "mamba.gguf", "mamba", vocab_from=demo_models.draft)
    drafter = write_eagle3_drafter(mamba, tmp_path / "for-mamba.gguf", layers=(0, 1, 2))
    code, said = _check_pair(mamba, drafter)
    assert code == 1 and said["reason"].endswith("this llama.cpp hands no layer inputs out of a 'mamba' target.")


def test_the_library_pairs_a_drafter_with_the_targets_it_can_read(files, tmp_path):
    """The model library lists an EAGLE-3 drafter first for a target it reads, and as
    unusable, saying why, for one it cannot."""
    import shutil

    from app.library.drafts import find_drafts
    from app.library.locations import FOLDER, Location
    from app.library.scan import scan_library

    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("target", "drafter", "bare"):
        shutil.copy(files[name], folder / f"{name}.gguf")
    bad = write_eagle3_drafter(files["bare"], folder / "wide.gguf", layers=(0, 1, 2), keys={"target_hidden_size": 96})
    result = scan_library([Location(FOLDER, folder)], cache_path=tmp_path / "library.json")
    entries = {Path(e.path).name: e for e in result.entries}
    ranked = find_drafts(entries["target.gguf"], result.entries)
    assert (ranked[0].entry.name, ranked[0].compatible) == ("drafter.gguf", True)
    assert ranked[0].reason.startswith("an EAGLE-3 drafter for this model: reads its layers 0, 2, 4")
    wide = next(c for c in ranked if c.entry.name == bad.name)
    assert not wide.compatible and "it reads rows 96 wide" in wide.reason


def _generate(target: Path, *extra: str, home: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "app", "generate", "--target", str(target), "--prompt",
                          "Tell me about the sea.", "--max-tokens", "32", "--temperature", "0", "--json", *extra],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env={**__import__("os").environ,
                                                                                    "TANDEM_HOME": str(home)})
    assert out.returncode == 0, out.stderr[-800:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_generate_with_the_drafter_named_equals_the_target_alone(files, tmp_path):
    drafted = _generate(files["target"], "--draft", str(files["drafter"]), home=tmp_path)
    plain = _generate(files["target"], "--no-speculation", home=tmp_path)
    assert drafted[0]["text"] == plain[0]["text"]
    assert drafted[0]["stats"]["drafter"] == "eagle3" and drafted[0]["stats"]["drafted"] > 0


def test_a_session_names_the_drafter_file_it_drafts_with(files):
    from app.session.config import ModelSpec
    from app.session.loading import load_session

    session = load_session(ModelSpec(target_path=str(files["target"]), draft_path=str(files["drafter"]), n_ctx=512))
    try:
        info = session.info
        assert (info.draft_name, info.drafter, info.note) == ("eagle3.gguf", DrafterKind.EAGLE3, "")
        assert info.speculation_available
    finally:
        session.close()


def test_the_backend_refuses_a_drafter_that_would_abort_llama_cpp(files, tmp_path):
    """Asked directly (no pair check before it), the target still judges the drafter
    before llama.cpp builds a graph that would end the process."""
    drafter = write_eagle3_drafter(files["bare"], tmp_path / "wide.gguf", layers=(0, 1, 2), width=96)
    target = _open(files["bare"])
    try:
        with pytest.raises(Exception, match="its own rows are 96 wide and the target's 64"):
            target.eagle_head(drafter, (0, 1, 2))
        prompt = target.tokenize("Still here", add_special=True, parse_special=False)
        assert len(target.evaluate(prompt, [len(prompt) - 1])[0]) == target.n_vocab  # the target runs on
    finally:
        target.close()
