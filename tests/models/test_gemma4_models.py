"""The generated Gemma 4 files (tests/gemma4_models.py) are what they claim: the target
loads in llama.cpp as ``gemma4`` with its sliding window and makes varied greedy text; its
assistant loads as ``gemma4-assistant``, runs only beside the target's context
(``ctx_other``), and guesses the quiet target's next token part of the time, because it
is derived from that target (one derived from another target does not). A file missing
what llama.cpp requires is refused at load, so these checks fail when the writers break.
"""

from __future__ import annotations

import llama_cpp as ll
import numpy as np
import pytest

from drafter_runs import Context, ModelPair, architecture, assistant_agreement, load_model
from gemma4_models import GEMMA4_QUIET, Gemma4Shape, write_gemma4_assistant, write_gemma4_model
from gguf_arrays import read_gguf

PROMPT = "Tell me a long story about a dragon and a knight, please."


@pytest.fixture(scope="module")
def files(demo_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gemma4")
    vocab = demo_models.draft
    quiet = write_gemma4_model(folder / "gemma4-quiet.gguf", vocab_from=vocab, **GEMMA4_QUIET)
    return {"vocab": vocab, "folder": folder,
            "target": write_gemma4_model(folder / "gemma4.gguf", vocab_from=vocab),
            "quiet": quiet, "assistant": write_gemma4_assistant(quiet, folder / "assistant.gguf")}


def test_the_target_loads_as_gemma4_and_decodes_varied_text(files):
    llm = ll.Llama(model_path=str(files["target"]), n_ctx=256, n_threads=1, verbose=False)
    try:
        assert llm.metadata["general.architecture"] == "gemma4"
        assert ll.llama_model_n_swa(llm.model) == Gemma4Shape().sliding_window
        assert ll.llama_model_n_layer(llm.model) == Gemma4Shape().n_layer
        demo = ll.Llama(model_path=str(files["vocab"]), vocab_only=True, verbose=False)
        assert llm.tokenize(b"Hello there") == demo.tokenize(b"Hello there")  # the demo's tokenizer
        demo.close()
        out = llm.create_completion(PROMPT, max_tokens=24, temperature=0.0)
        tokens = llm.tokenize(out["choices"][0]["text"].encode(), add_bos=False, special=True)
        assert len(set(tokens)) >= 12, out["choices"][0]["text"]
    finally:
        llm.close()


def test_the_quiet_target_keeps_the_gemma_layout(files):
    quiet = read_gguf(files["quiet"])
    assert quiet.value("attention.sliding_window_pattern") == [True, True, True, False]
    assert quiet.value("attention.head_count_kv") == [2, 2, 2, 1]
    norm = quiet.array("blk.0.post_attention_norm.weight")
    assert np.allclose(norm, GEMMA4_QUIET["mixer_gain"])  # the post-norm's weight is the block's gain


def test_the_assistant_loads_as_its_architecture_beside_the_targets_context(files):
    with ModelPair(files["quiet"], files["assistant"]) as pair:
        tmodel, amodel = pair.target_model, pair.drafter_model
        assert architecture(amodel) == "gemma4-assistant"
        assert ll.llama_model_n_embd_out(amodel) == ll.llama_model_n_embd(tmodel) == 64
        assert ll.llama_model_n_embd(amodel) == 96 and ll.llama_model_n_layer_nextn(amodel) == 2
        with pytest.raises(RuntimeError):  # llama.cpp: "Gemma4Assistant requires ctx_other to be set"
            Context(amodel)
        target = pair.context(tmodel)
        assistant = pair.context(amodel, other=target, mtp=True)
        from llama_cpp import llama_cpp_ext as ext

        assert ext.llama_get_ctx_other(assistant.ctx) == target.ctx


def test_the_assistant_agrees_with_its_target_part_of_the_time(files):
    rate, tokens = assistant_agreement(files["quiet"], files["assistant"], PROMPT, steps=32)
    assert 0.35 <= rate <= 0.95, rate
    assert len(set(tokens)) >= 16  # the quiet target still writes varied text


def test_an_assistant_derived_from_another_target_does_not_agree(files):
    other = write_gemma4_model(files["folder"] / "other.gguf", vocab_from=files["vocab"], seed=1, **GEMMA4_QUIET)
    stranger = write_gemma4_assistant(other, files["folder"] / "stranger.gguf")
    rate, _ = assistant_agreement(files["quiet"], stranger, PROMPT, steps=32)
    assert rate < 0.15, rate


@pytest.mark.parametrize(("writer", "change"), [
    ("target", {"drop": ["rope_freqs.weight"]}),
    ("target", {"drop": ["blk.1.post_ffw_norm.weight"]}),
    ("target", {"keys": {"attention.sliding_window_pattern": None}}),
    ("assistant", {"drop": ["nextn.pre_projection.weight"]}),
    ("assistant", {"drop": ["blk.0.layer_output_scale.weight"]}),
    ("assistant", {"keys": {"embedding_length_out": None}}),  # "requires embedding_length_out to carry ..."
])
def test_llama_cpp_refuses_a_file_missing_what_it_requires(files, writer, change):
    path = files["folder"] / f"broken-{writer}.gguf"
    if writer == "target":
        write_gemma4_model(path, vocab_from=files["vocab"], **change)
    else:
        write_gemma4_assistant(files["quiet"], path, **change)
    with pytest.raises(RuntimeError):
        load_model(path)


def test_the_writers_refuse_what_llama_cpp_would(files):
    with pytest.raises(ValueError, match="width"):
        write_gemma4_assistant(files["quiet"], files["folder"] / "x.gguf", n_embd=64)
    with pytest.raises(ValueError, match="gemma4 target"):
        write_gemma4_assistant(files["vocab"], files["folder"] / "x.gguf")
    with pytest.raises(ValueError, match="global_every"):
        Gemma4Shape(global_every=1)
