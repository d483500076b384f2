"""The generated recurrent and hybrid models (tests/recurrent_models.py) are what they claim.

Each architecture's target loads through Tandem's own loader (header validator, then
llama.cpp), is recurrent or hybrid by llama.cpp's own account, tokenizes and renders
chats exactly as the demo models do, and makes varied greedy text that depends on
early context, the same in a fresh process; its draft is a quantised copy of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import llama_cpp as ll
import numpy as np
import pytest

from recurrent_models import ARCHITECTURES, ATTENTION_ARCHITECTURES

from app.backends.llama.backend import LlamaBackend
from app.backends.llama.vocabulary import LlamaVocab
from app.backends.model_check import require_model_runs
from app.engine.prompting.chat import chat_tokens, render_chat

ROOT = Path(__file__).resolve().parents[3]
ARCHS = list(ARCHITECTURES)
CHAT = [{"role": "user", "content": "Tell me a long story about a dragon and a knight, please."}]
N_GREEDY = 64


@pytest.fixture(scope="module")
def loaded(recurrent_pairs):
    """arch -> its target, loaded once for the module."""
    models: dict[str, LlamaBackend] = {}

    def get(arch: str) -> LlamaBackend:
        if arch not in models:
            models[arch] = LlamaBackend(recurrent_pairs[arch][0], n_ctx=4096, n_threads=1)
        return models[arch]

    yield get
    for model in models.values():
        model.close()


@pytest.fixture(scope="module")
def demo_vocab(demo_models):
    vocab = LlamaVocab(demo_models.draft)
    yield vocab
    vocab.close()


def _prompt(model) -> list[int]:
    return chat_tokens(model, CHAT)  # the model's own chat template, as every front end renders it


def _greedy(model: LlamaBackend, prompt: list[int], n: int = N_GREEDY) -> tuple[list[int], list[np.ndarray]]:
    model.trim(0)
    rows = [model.evaluate(prompt, [len(prompt) - 1])[0]]
    out: list[int] = []
    for _ in range(n):
        out.append(int(np.argmax(rows[-1])))
        rows.append(model.evaluate([out[-1]], [0])[0])
    model.trim(0)
    return out, rows[:-1]


def _shortest_period(tokens: list[int]) -> int | None:
    """The smallest p <= 8 with which the last 24 tokens repeat, if any."""
    tail = tokens[-24:]
    return next((p for p in range(1, 9) if all(tail[i] == tail[i + p] for i in range(len(tail) - p))), None)


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_calls_it_what_the_table_says(arch, loaded):
    model = loaded(arch)
    assert model.architecture == arch
    kind = ARCHITECTURES[arch].memory
    assert bool(ll.llama_model_is_recurrent(model._model)) == (kind == "recurrent")
    assert bool(ll.llama_model_is_hybrid(model._model)) == (kind == "hybrid")
    assert model.n_ctx_train >= 4096


@pytest.mark.parametrize("arch", ARCHS)
def test_it_tokenizes_and_renders_chats_as_the_demo_models(arch, loaded, demo_vocab):
    model = loaded(arch)
    assert model.n_vocab == demo_vocab.n_vocab
    assert model.chat_template == demo_vocab.chat_template
    assert (model.bos_id, model.eos_id, model.eog_ids) == (demo_vocab.bos_id, demo_vocab.eos_id, demo_vocab.eog_ids)
    assert chat_tokens(model, CHAT) == chat_tokens(demo_vocab, CHAT)
    text = render_chat(model.chat_template, CHAT) + "naïve café 中文 🙂 <|im_end|>"
    for special in (True, False):
        assert model.tokenize(text, add_special=special, parse_special=special) == \
            demo_vocab.tokenize(text, add_special=special, parse_special=special)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_text_is_varied_and_logits_are_neither_flat_nor_one_sided(arch, loaded):
    model = loaded(arch)
    tokens, rows = _greedy(model, _prompt(model))
    assert len(set(tokens)) >= N_GREEDY // 2, tokens
    assert _shortest_period(tokens) is None, tokens
    for row in rows:
        p = np.exp(row - row.max())
        p /= p.sum()
        assert 1.0 < row.std() < 10.0
        assert 1e-3 < p.max() < 0.97


@pytest.mark.parametrize("arch", ARCHS)
def test_the_continuation_depends_on_an_early_token(arch, loaded):
    model = loaded(arch)
    prompt = _prompt(model)
    # The user's first word, 20 tokens before the end: a model that sees only the last
    # few tokens continues both prompts alike.
    changed = list(prompt)
    changed[3] = model.tokenize(" Write", add_special=False, parse_special=False)[0]
    assert changed[3] != prompt[3] and len(prompt) - 3 >= 16
    assert _greedy(model, prompt, 32)[0] != _greedy(model, changed, 32)[0]


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_rolls_back_exactly_the_architectures_the_table_says(arch, loaded):
    # The table's rs_rollback column against llama.cpp itself: a context asking for
    # n_rs_seq snapshots keeps them only where llm_arch_supports_rs_rollback says so, and
    # only there does removing the last tokens succeed -- and then it is exact: the
    # tokens decoded again give the logits they gave the first time.
    model = loaded(arch)
    cparams = ll.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch, cparams.n_seq_max = 256, 64, 64, 1
    cparams.n_threads = cparams.n_threads_batch = 1
    cparams.n_rs_seq = 4
    ctx = ll.llama_init_from_model(model._model, cparams)
    assert ctx
    batch = ll.llama_batch_init(64, 0, 1)
    try:
        def decode(tokens: list[int], start: int) -> np.ndarray:
            for i, token in enumerate(tokens):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
                batch.seq_id[i][0], batch.logits[i] = 0, True
            batch.n_tokens = len(tokens)
            assert ll.llama_decode(ctx, batch) == 0
            return np.ctypeslib.as_array(ll.llama_get_logits(ctx), shape=(len(tokens), model.n_vocab)).copy()

        prompt = _prompt(model)[:12]
        first = decode(prompt, 0)
        memory = ll.llama_get_memory(ctx)
        rolled_back = ll.llama_memory_seq_rm(memory, 0, 10, -1)
        assert (ll.llama_n_rs_seq(ctx) > 0) == ARCHITECTURES[arch].rs_rollback
        assert rolled_back == ARCHITECTURES[arch].rs_rollback
        if rolled_back:
            assert np.array_equal(decode(prompt[10:], 10), first[10:])
    finally:
        ll.llama_batch_free(batch)
        ll.llama_free(ctx)


@pytest.mark.parametrize("arch", ARCHS)
def test_verification_sized_batches_give_the_single_token_logits(arch, loaded):
    # What exact speculation rests on: the Q8_0 target scores a batch of a round's size
    # (here 9) bit for bit as it scores the same tokens one at a time.
    model = loaded(arch)
    prompt = _prompt(model)
    tokens, singles = _greedy(model, prompt, 18)
    model.evaluate(prompt[:-1], [])
    rest = prompt[-1:] + tokens[:-1]
    batched = np.concatenate([model.evaluate(rest[i:i + 9], range(len(rest[i:i + 9])))
                              for i in range(0, len(rest), 9)])
    model.trim(0)
    assert np.array_equal(batched, np.array(singles))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_draft_is_a_quantised_copy(arch, recurrent_pairs, loaded):
    target = loaded(arch)
    draft = LlamaBackend(recurrent_pairs[arch][1], n_ctx=512, n_threads=1)
    try:
        assert draft.architecture == arch and draft.n_vocab == target.n_vocab
        assert draft._meta("general.file_type") == str(ll.LLAMA_FTYPE_MOSTLY_Q4_0)
        assert bool(ll.llama_model_is_recurrent(draft._model)) == bool(ll.llama_model_is_recurrent(target._model))
        # Close to the target, not the same model: logits correlate, and not perfectly.
        prompt = _prompt(target)
        t = target.evaluate(prompt, [len(prompt) - 1])[0]
        d = draft.evaluate(prompt, [len(prompt) - 1])[0]
        target.trim(0)
        assert 0.5 < np.corrcoef(t, d)[0, 1] < 1.0
    finally:
        draft.close()


@pytest.mark.parametrize("arch", ARCHS[:1])
def test_the_trial_load_passes_it(arch, recurrent_pairs, tmp_path):
    # The child that loads every new file before the app does (app/backends/model_check.py).
    check = require_model_runs(recurrent_pairs[arch][0], cache_dir=tmp_path)
    assert check.ok and not check.cached


_CHILD = """
import json, sys
import numpy as np
from app.backends.llama.backend import LlamaBackend
out = {}
for arch, path, prompt in json.loads(sys.argv[1]):
    m = LlamaBackend(path, n_ctx=4096, n_threads=1)
    row = m.evaluate(prompt, [len(prompt) - 1])[0]
    tokens = []
    for _ in range(%d):
        tokens.append(int(np.argmax(row)))
        row = m.evaluate([tokens[-1]], [0])[0]
    m.close()
    out[arch] = tokens
print(json.dumps(out))
""" % N_GREEDY


def test_a_fresh_process_continues_every_model_alike(recurrent_pairs, loaded):
    jobs = [(arch, str(recurrent_pairs[arch][0]), _prompt(loaded(arch))) for arch in ARCHS]
    here = {arch: _greedy(loaded(arch), prompt)[0] for arch, _, prompt in jobs}
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(jobs)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == here


@pytest.mark.parametrize("arch, options, phrase", [
    ("rwkv7", {}, "unknown architecture"),
    ("mamba", {"ftype": "Q4_0"}, "ftype must be"),
    ("mamba2", {"n_embd": 64, "ssm_heads": 5}, "ssm_heads"),
    ("qwen35", {"ssm_heads": 4, "ssm_groups": 4}, "ssm_heads / 2 by ssm_groups"),
    ("lfm2", {"n_layer": 2}, "at least 3 layers"),
])
def test_shapes_llama_cpp_would_abort_on_are_refused_before_writing(arch, options, phrase, tmp_path):
    from recurrent_models import write_recurrent_model

    with pytest.raises(ValueError, match=phrase):
        write_recurrent_model(tmp_path / "x.gguf", arch, vocab_from=tmp_path / "unread.gguf", **options)
    assert not (tmp_path / "x.gguf").exists()


def test_the_tool_lists_every_architecture_with_its_memory():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "make_recurrent_model.py"), "--list"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()}
    # gemma4: the Gemma 4 target its assistant and DFlash drafter read (tests/gemma4_models.py)
    assert rows == {**{name: a.memory for name, a in {**ARCHITECTURES, **ATTENTION_ARCHITECTURES}.items()},
                    "gemma4": "attention"}
