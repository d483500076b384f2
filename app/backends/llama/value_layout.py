"""A sequence's cache state moved between the two ways llama.cpp lays out its values.

Without flash attention llama.cpp stores each layer's values transposed (a row per
embedding element, a column per cell); with it, a row per cell, like the keys. Its
sequence state (``llama_state_seq_get_data``) carries the layout as a flag and a context
refuses a state of the other one ("incompatible V transposition"). ``transpose_values``
rewrites the value blocks, so a prompt read by a flash-attention context can continue in
one without (``flash_reader.py``).

The layout read here is llama.cpp's, for a plain attention cache with one stream
(``llama_kv_cache::state_write``): a magic and the sequence id; the stream count; the
cell count; per cell its position, its sequence count and those ids; the value layout
flag and the layer count; per layer the keys (type, row size, rows); per layer with
values, the values: as rows (type, row size, rows) or transposed (type, element size,
embedding size, elements). Anything else (several streams, an unknown value type, cells
with extra fields, sizes that do not add up to the buffer exactly) gives None, and the
caller reads the prompt where it is.
"""

from __future__ import annotations

import numpy as np

MAGIC = 0xAF143CD8  # llama-context.cpp's io_magic
# ggml types whose values are single elements (a block type cannot be transposed): F32, F16, BF16.
ELEMENT_BYTES = {0: 4, 1: 2, 30: 2}
_ELEMENT = {4: np.uint32, 2: np.uint16}  # moved as whole elements: a byte-wise transpose is 3x slower


def transpose_values(state: np.ndarray, transposed: bool) -> np.ndarray | None:
    """``state`` (uint8, one sequence of a plain attention cache) with its values laid out
    ``transposed`` (a context without flash attention) or as rows (with it), rewritten in
    place (the headers keep their sizes; a fresh copy of a long prompt's cache costs more
    in page faults than the transposition itself); None, with ``state`` untouched, where
    it is not such a state in the other layout."""
    b = state
    if b.dtype != np.uint8 or b.ndim != 1 or not b.flags.writeable:
        return None

    def u32(at: int) -> int:
        return int(b[at:at + 4].view(np.uint32)[0])

    def u64(at: int) -> int:
        return int(b[at:at + 8].view(np.uint64)[0])

    if len(b) < 16 or u32(0) != MAGIC or u32(8) != 1:
        return None
    cells, at = u32(12), 16
    if cells == 0:
        return None
    for _ in range(cells):  # position, sequence count, the sequences' ids
        if at + 8 > len(b):
            return None
        at += 8 + 4 * u32(at + 4)
    if at + 8 > len(b) or u32(at) != (0 if transposed else 1):
        return None
    flag, n_layer = at, u32(at + 4)
    at += 8
    for _ in range(n_layer):  # keys: as they are
        if at + 12 > len(b):
            return None
        at += 12 + cells * u64(at + 4)
    blocks = []  # (header, element size, width) of each layer's values
    while at < len(b):
        if at + 12 > len(b):
            return None
        size = ELEMENT_BYTES.get(u32(at))
        if size is None:
            return None
        if transposed:  # now rows of cells
            row = u64(at + 4)
            if row % size:
                return None
            width = row // size
        else:  # now rows of elements
            if u32(at + 4) != size:
                return None
            width = u32(at + 8)
        blocks.append((at, size, width))
        at += 12 + cells * width * size
    if at != len(b):
        return None
    b[flag:flag + 4] = np.array([int(transposed)], np.uint32).view(np.uint8)
    for at, size, width in blocks:
        span = b[at + 12:at + 12 + cells * width * size].view(_ELEMENT[size])
        if transposed:  # rows of cells -> rows of elements
            span[:] = span.reshape(cells, width).T.reshape(-1)
            b[at + 4:at + 12] = np.array([size, width], np.uint32).view(np.uint8)
        else:
            span[:] = span.reshape(width, cells).T.reshape(-1)
            b[at + 4:at + 12] = np.array([width * size], np.uint64).view(np.uint8)
    return b
