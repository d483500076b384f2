"""Loading a target with its drafter."""

from __future__ import annotations

import numpy as np

from app.backends.loader import load_pair
from app.engine.types import SamplingConfig


def test_prompt_lookup_ends_a_copy_before_the_targets_end_of_turn(demo_models):
    pair = load_pair(demo_models.target, drafter="lookup", n_ctx=512)
    try:
        end = min(pair.target.eog_ids)
        # An earlier turn ended "... 10 11 12 14 <end>"; the reply now writes "10 11 12".
        context = [10, 11, 12, 14, end, 13, 10, 11, 12]
        draft = pair.engine.drafter.propose(context, 5, SamplingConfig(), np.random.default_rng(0), 0.0)
        assert draft.tokens == [14]
    finally:
        pair.close()


def test_one_load_of_the_demo_pair_reads_each_header_once(demo_models, monkeypatch):
    """The pair check, the trial load's caller and both backends take the one ModelFile
    the load opened: the real header walk runs once per file (counted on the real
    function, everything else real)."""
    import collections
    from pathlib import Path

    from app.engine.gguf import header as gguf_header
    from app.engine.gguf.model_file import forget_opened_files

    walked: collections.Counter[Path] = collections.Counter()
    walk = gguf_header._walk

    def counted(path, wanted, shown):
        walked[Path(path).resolve()] += 1
        return walk(path, wanted, shown)

    monkeypatch.setattr(gguf_header, "_walk", counted)
    forget_opened_files()  # earlier tests opened these files in this process
    pair = load_pair(demo_models.target, demo_models.draft, n_ctx=256)
    try:
        assert pair.draft is not None and pair.compatibility.ok
        assert pair.target.model_file.n_layers == 30 and pair.target.model_file.memory_kind == "attention"
    finally:
        pair.close()
    assert walked == {demo_models.target.resolve(): 1, demo_models.draft.resolve(): 1}
