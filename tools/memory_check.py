"""``tandem fit``'s estimate of each model against what llama.cpp then allocates for it.

    python tools/memory_check.py MODEL.gguf [MODEL.gguf ...] [--ctx 8192] [--draft] [--json]

Each file is estimated from its header (app/engine/gguf/memory_estimate.py), then loaded
with the context Tandem makes for it (as a target, or ``--draft`` as a draft), and the
buffers llama.cpp reports while loading (weights, KV cache, recurrent state, output,
compute) are summed. One row per file: both totals, their ratio, and each part that
differs by more than 5%. Run it on a model the estimate gets wrong and attach the output
to the report.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MiB = 2**20


def check(path: Path, n_ctx: int, *, draft: bool) -> dict:
    from app.backends.llama.backend import LlamaBackend
    from app.engine.gguf.model_file import open_model_file
    from app.session.fit import estimate_for

    estimate = estimate_for(open_model_file(path), n_ctx, draft=draft)
    model = LlamaBackend(path, n_ctx=n_ctx, n_threads=1, exact_batches=not draft, rs_snapshots=0 if draft else None)
    try:
        real: collections.Counter = collections.Counter()
        for _device, part, size in model.buffers:
            real[part] += size
    finally:
        model.close()
    parts = estimate.parts()
    parts.pop("checkpoints")
    total = sum(real.values())
    return {"file": path.name, "n_ctx": n_ctx, "role": "draft" if draft else "target",
            "estimate": estimate.llama_bytes, "llama_cpp": total, "ratio": round(estimate.llama_bytes / total, 4),
            "parts": {k: [parts.get(k, 0), real.get(k, 0)] for k in sorted(set(parts) | set(real))}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, metavar="MODEL.gguf")
    parser.add_argument("--ctx", type=int, default=8192, help="context in tokens (default: 8192)")
    parser.add_argument("--draft", action="store_true", help="the context a draft gets (no snapshots, ...)")
    parser.add_argument("--json", action="store_true", help="one JSON object per file")
    args = parser.parse_args(argv)
    for path in args.paths:
        row = check(path, args.ctx, draft=args.draft)
        if args.json:
            print(json.dumps(row))
            continue
        off = ", ".join(f"{k} {e / MiB:.1f} vs {r / MiB:.1f} MiB" for k, (e, r) in row["parts"].items()
                        if abs(e - r) > 0.05 * max(r, MiB))
        print(f"{row['file']}: estimate {row['estimate'] / MiB:.1f} MiB, llama.cpp {row['llama_cpp'] / MiB:.1f} MiB "
              f"({row['ratio']:.3f}x) at {args.ctx:,} tokens as a {row['role']}" + (f"; apart: {off}" if off else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
