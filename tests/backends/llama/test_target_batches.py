"""The hook a drafter that reads its target is told through (app/backends/llama/target_batches.py):
every change to the target's sequence reaches one listener, with its positions and tokens
(a prompt's chunks, verifications, a tree's kept branch, a kept branch read again, trims),
the rows a head keeps from it are the rows a line of the same tokens makes, a chat's saved
state brings them back, and no module but the head's own reads them."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from app.backends.llama.backend import LlamaBackend
from app.backends.llama.backend_error import BackendError
from app.backends.llama.target_batches import TargetBatch
from app.engine.speculation.drafters import HeadDrafter, ModelDrafter
from app.engine.speculation.speculative import SpeculativeEngine
from app.engine.types import SamplingConfig, SpecConfig

ROOT = Path(__file__).resolve().parents[3]


class Mirror:
    """A listener that keeps nothing but the sequence it is told of, and what kinds of batch came."""

    row_width = None

    def __init__(self) -> None:
        self.sequence: list[int] = []
        self.seen: Counter[str] = Counter()
        self.sizes: list[int] = []

    def target_read(self, batch: TargetBatch) -> None:
        assert 0 <= batch.start <= len(self.sequence), "a batch leaves no gap"
        if not batch.tokens:
            self.seen["trim"] += 1
            del self.sequence[batch.start:]
            return
        outputs = batch.pick(np.arange(batch.decoded))  # which of the last decode's rows are these
        assert len(outputs) == len(batch.tokens) and len(set(outputs.tolist())) == len(outputs)
        if isinstance(batch.outputs, list):
            self.seen["kept branch"] += 1
        elif batch.start < len(self.sequence):
            self.seen["read again"] += 1  # a kept branch, in order, at the head of a batch
        else:
            self.seen["line"] += 1
        self.sizes.append(len(batch.tokens))
        self.sequence[batch.start:batch.end] = list(batch.tokens)

    def rows_copy(self):
        return None

    def restore_rows(self, saved) -> None:
        raise AssertionError("it kept no rows")


def test_a_listener_is_told_every_batch_the_target_reads(demo_models):
    target = LlamaBackend(demo_models.target, n_ctx=2048, n_threads=0)
    draft = LlamaBackend(demo_models.draft, n_ctx=2048, n_threads=0)
    try:
        mirror = Mirror()
        target.listen(mirror)
        with pytest.raises(BackendError, match="another drafter"):
            target.listen(Mirror())
        spec = SpeculativeEngine(target, ModelDrafter(draft, target.n_vocab, eog_ids=target.eog_ids))
        words = " ".join(f"item {i} is on the list," for i in range(150))
        long = target.tokenize(words, add_special=True, parse_special=False)
        assert len(long) > 2 * target.n_batch
        short = target.tokenize("Once upon a time, in a land far away,", add_special=True, parse_special=False)
        before = target.read_apart
        for prompt, tree, pause in ((long, "on", None), (short, "on", None), (long, "off", lambda: None)):
            g = spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=4, tree=tree), max_tokens=40, pause=pause)
            g.run()
            assert mirror.sequence == target.tokens
        assert target.read_apart == before  # read here: a reading apart would make no rows for it
        assert mirror.seen["kept branch"] > 0 and mirror.seen["read again"] > 0
        assert mirror.seen["trim"] > 0 and mirror.seen["line"] > 0
        assert target.n_batch in mirror.sizes  # a long prompt's chunks, each told
    finally:
        target.close()
        draft.close()


def _open(path) -> LlamaBackend:
    return LlamaBackend(path, n_ctx=1024, n_threads=1, load_mtp=True)  # one thread: results depend on the batch


def test_the_rows_a_head_keeps_are_those_a_line_makes(mtp_models):
    """Over trees (kept branches, some read again), rollbacks and a second turn, the head
    keeps for each position the row a line of the same tokens gives there."""
    target, line = _open(mtp_models["glm4moe"]), _open(mtp_models["glm4moe"])
    try:
        head = target.mtp_head()
        spec = SpeculativeEngine(target, HeadDrafter(head, target.n_vocab, eog_ids=target.eog_ids))
        prompt = target.tokenize("A list of animals:", add_special=True, parse_special=False)
        g = spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=4, tree="on"), max_tokens=48)
        more = [e.id for e in g] + target.tokenize(" And then?", add_special=False, parse_special=False)
        g2 = spec.generate(prompt + more, SamplingConfig(), SpecConfig(draft_max=4, tree="on"), max_tokens=24)
        g2.run()
        assert g.stats.tree_rounds + g2.stats.tree_rounds > 0
        held = len(target.tokens)
        rows, known = head.rows_copy()
        assert known[:held].all() and not known[held:].any()
        line_head = line.mtp_head()
        line.evaluate(target.tokens, [])
        line_rows, _ = line_head.rows_copy()
        assert np.allclose(rows[:held].astype(np.float32), line_rows[:held].astype(np.float32), atol=1e-2)
    finally:
        target.close()
        line.close()


def test_a_saved_state_brings_the_heads_rows_back(mtp_models):
    target = _open(mtp_models["qwen35"])
    try:
        head = target.mtp_head()
        spec = SpeculativeEngine(target, HeadDrafter(head, target.n_vocab, eog_ids=target.eog_ids))
        prompt = target.tokenize("Once upon a time,", add_special=True, parse_special=False)
        spec.generate(prompt, SamplingConfig(), SpecConfig(draft_max=3), max_tokens=24).run()
        held = len(target.tokens)
        image = target.cache_image()
        rows, known = head.rows_copy()
        assert image.rows is not None and known[:held].all()
        target.trim(0)
        target.evaluate(target.tokenize("Something else entirely.", add_special=True, parse_special=False), [])
        target.load_cache_image(image)
        back, back_known = head.rows_copy()
        assert target.tokens == image.tokens
        assert back_known[:held].all() and not back_known[held:].any()
        assert np.array_equal(back[:held], rows[:held])
    finally:
        target.close()


def _reads_of(attribute: str) -> list[tuple[str, int, str]]:
    """Every ``x.attribute`` in app/: (file, line, what ``x`` is)."""
    found = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == attribute:
                owner = node.value.id if isinstance(node.value, ast.Name) else ast.unparse(node.value)
                found.append((path.relative_to(ROOT).as_posix(), node.lineno, owner))
    return found


def test_only_the_head_reads_the_rows_it_keeps():
    """A drafter's rows (``_hidden``) are its own: no other object's are read anywhere, and
    among the backends and the engine only the head's own module names them."""
    reads = _reads_of("_hidden")
    assert [r for r in reads if r[2] != "self"] == []
    assert [r for r in reads if r[0].startswith(("app/backends/", "app/engine/"))
            and r[0] != "app/backends/llama/mtp_head.py"] == []
