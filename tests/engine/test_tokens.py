"""How far two token sequences agree (app/engine/tokens.py), at every place they can part."""

from __future__ import annotations

import pytest

from app.engine.tokens import common_prefix


@pytest.mark.parametrize("part", [0, 1, 255, 256, 257, 600, 999])
def test_the_common_prefix_ends_where_they_part(part):
    a = list(range(1000))
    b = a[:part] + [-1] + a[part + 1:]
    assert common_prefix(a, b) == common_prefix(b, a) == part
    assert common_prefix(tuple(a), b) == part  # any sequence


def test_a_sequence_shares_all_of_itself_with_a_longer_one():
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix([], [1]) == 0
