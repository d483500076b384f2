"""The generated DFlash drafters (tests/dflash_models.py) are what they claim: each loads in
llama.cpp as ``dflash``, names its mask token and the target layers it reads, runs only
beside its target's context (whose token embedding and output matrix it borrows), takes
the target's layer inputs into its cache, and guesses a quiet target's next token at its
block's first mask part of the time: for a Gemma 4 target and for a Qwen 3.5 hybrid with
an MTP trunk. Its window and its pass-through are what make it agree (without them it
does not), and a file missing what llama.cpp requires is refused at load.
"""

from __future__ import annotations

import llama_cpp as ll
import pytest

from dflash_models import write_dflash_drafter
from drafter_runs import Context, ModelPair, architecture, dflash_agreement, load_model
from gemma4_models import GEMMA4_QUIET, write_gemma4_model
from gguf_arrays import read_gguf
from recurrent_models import write_mtp_model

PROMPT = "Tell me a long story about a dragon and a knight, please."


@pytest.fixture(scope="module")
def files(demo_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dflash")
    target = write_gemma4_model(folder / "gemma4-quiet.gguf", vocab_from=demo_models.draft, **GEMMA4_QUIET)
    return {"folder": folder, "target": target, "drafter": write_dflash_drafter(target, folder / "dflash.gguf")}


def test_it_loads_as_dflash_beside_the_targets_context(files):
    with ModelPair(files["target"], files["drafter"]) as pair:
        tmodel, dmodel = pair.target_model, pair.drafter_model
        assert architecture(dmodel) == "dflash"
        assert ll.llama_model_n_embd(dmodel) == ll.llama_model_n_embd(tmodel)  # fc reads rows this wide
        assert ll.llama_vocab_mask(ll.llama_model_get_vocab(dmodel)) == 0      # the unknown token
        assert ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(dmodel)) == \
            ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(tmodel))
        meta = read_gguf(files["drafter"])
        assert meta.value("target_layers") == [1, 2, 3] and meta.value("block_size") == 3
        assert "token_embd.weight" not in meta.tensors and "output.weight" not in meta.tensors
        with pytest.raises(RuntimeError):  # llama.cpp: "dflash requires ctx_other to be set"
            Context(dmodel)
        target = pair.context(tmodel)
        drafter = pair.context(dmodel, other=target)


def test_its_first_guess_agrees_with_a_gemma4_target_part_of_the_time(files):
    rate, tokens, injected = dflash_agreement(files["target"], files["drafter"], PROMPT, steps=32)
    assert injected, "the target's layer inputs were not read (llama_get_embeddings_layer_inp missing)"
    assert 0.4 <= rate <= 0.95, rate
    assert len(set(tokens)) >= 16


def test_it_agrees_with_a_qwen35_hybrid_too(demo_models, files):
    target = write_mtp_model(files["folder"] / "qwen35-mtp.gguf", "qwen35", vocab_from=demo_models.draft)
    drafter = write_dflash_drafter(target, files["folder"] / "qwen35-dflash.gguf")
    assert read_gguf(drafter).value("target_layers") == [1, 2, 3]
    rate, _, injected = dflash_agreement(target, drafter, PROMPT, steps=32)
    assert injected and 0.15 <= rate <= 0.95, rate


@pytest.mark.parametrize("change", [
    {"window": 64},   # the first mask sees the context too: the last token's lead is lost
    {"noise": 20.0},  # the last token's row barely reaches the residual: the mask's own wins
])
def test_without_its_window_or_its_pass_through_it_does_not_agree(files, change):
    drafter = write_dflash_drafter(files["target"], files["folder"] / "changed.gguf", **change)
    rate, _, _ = dflash_agreement(files["target"], drafter, PROMPT, steps=24)
    assert rate < 0.15, rate


@pytest.mark.parametrize("change", [
    {"drop": ["fc.weight"]},
    {"drop": ["enc.output_norm.weight"]},
    {"drop": ["blk.0.attn_k_norm.weight"]},
    {"keys": {"target_layers": None}},  # "DFlash model requires 'target_layers' in GGUF metadata"
])
def test_llama_cpp_refuses_a_file_missing_what_it_requires(files, change):
    path = write_dflash_drafter(files["target"], files["folder"] / "broken.gguf", **change)
    with pytest.raises(RuntimeError):
        load_model(path)
