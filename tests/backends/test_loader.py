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
