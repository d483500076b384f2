"""A sequence's cache state moved between the two ways llama.cpp lays out its values.

Without flash attention llama.cpp stores each layer's values transposed (a row per
embedding element, a column per cell); with it, a row per cell, like the keys. Its
sequence state (``llama_state_seq_get_data``) carries the layout as a flag and a context
refuses a state of the other one ("incompatible V transposition"). ``relaid`` rewrites
the value blocks, so a prompt read by a flash-attention context can continue in one
without (``flash_reader.py``).

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


def relaid(state: np.ndarray, transposed: bool) -> np.ndarray | None:
    """``state`` (uint8, one sequence of a plain attention cache) with its values laid out
    ``transposed`` (a context without flash attention) or as rows (with it); None where
    it is not such a state in the other layout."""
    b = np.asarray(state, dtype=np.uint8)

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
    n_layer = u32(at + 4)
    parts = [b[:at], np.array([int(transposed)], np.uint32).view(np.uint8), b[at + 4:at + 8]]
    at += 8
    for _ in range(n_layer):  # keys: as they are
        if at + 12 > len(b):
            return None
        end = at + 12 + cells * u64(at + 4)
        parts.append(b[at:end])
        at = end
    while at < len(b):  # values, one block per layer that has them
        if at + 12 > len(b):
            return None
        size = ELEMENT_BYTES.get(u32(at))
        if size is None:
            return None
        start = at + 12
        if transposed:  # rows of cells -> rows of elements
            row = u64(at + 4)
            if row % size:
                return None
            width, at = row // size, start + cells * row
            if at > len(b):
                return None
            block = b[start:at].reshape(cells, width, size).transpose(1, 0, 2)
            header = np.array([size, width], np.uint32).view(np.uint8)
        else:
            if u32(at + 4) != size:
                return None
            width = u32(at + 8)
            at = start + cells * width * size
            if at > len(b):
                return None
            block = b[start:at].reshape(width, cells, size).transpose(1, 0, 2)
            header = np.array([width * size], np.uint64).view(np.uint8)
        parts += [b[start - 12:start - 8], header, np.ascontiguousarray(block).reshape(-1)]
    if at != len(b):
        return None
    return np.concatenate(parts)
