"""Operations on token sequences that every layer shares: how far two agree
(``common_prefix``), which tells what of a cache a prompt can reuse."""

from __future__ import annotations

from typing import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the shared prefix; compares in C-level slices since it runs every round."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    lo, step = 0, 256
    while lo < n and list(a[lo:lo + step]) == list(b[lo:lo + step]):
        lo += step
    while lo < n and a[lo] == b[lo]:
        lo += 1
    return lo
