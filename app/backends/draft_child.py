"""Writing a draft from a target, meant to run in a child process.

``python -m app --make-draft SOURCE DEST FTYPE|keep [LAYER ...]`` (``draft_maker``
starts it) runs llama.cpp's quantizer, dropping the given layers. ``llama_model_quantize``
has no progress callback, but it logs one line per tensor (``[  12/ 272] blk.1.attn_q…``):
each becomes a JSON record on stdout, ``{"stage": "writing", "done": 12}``, and the last
one ``{"stage": "done", "ok": ...}``. llama.cpp's warnings and errors go to stderr, where
the parent looks for its last words. A child, so that a cancel is a kill and an abort in
llama.cpp ends only this process.
"""

from __future__ import annotations

import json
import logging
import re
import sys

_TENSOR_LINE = re.compile(r"^\[\s*(\d+)/\s*\d+\]")


class _TensorProgress(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        match = _TENSOR_LINE.match(record.getMessage())
        if match:
            _emit({"stage": "writing", "done": int(match.group(1))})
        elif record.levelno >= logging.WARNING:
            print(record.getMessage(), file=sys.stderr, flush=True)


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or not all(a.isdigit() for a in args[3:]):
        print("usage: python -m app --make-draft SOURCE DEST FTYPE|keep [LAYER ...]", file=sys.stderr)
        return 2
    source, dest, ftype = args[:3]
    llama_log = logging.getLogger("tandem.llama")
    llama_log.addHandler(_TensorProgress())
    llama_log.setLevel(logging.DEBUG)  # the per-tensor lines are llama.cpp's INFO, logged at DEBUG
    llama_log.propagate = False
    try:
        from app.backends.llama.quantizer import quantize

        quantize(source, dest, None if ftype == "keep" else ftype, [int(a) for a in args[3:]])
    except Exception as exc:  # noqa: BLE001 - the parent wants one line, whatever it was
        from app.errors import TandemError

        _emit({"stage": "done", "ok": False,
               "error": str(exc) if isinstance(exc, TandemError) else f"{type(exc).__name__}: {exc}"})
        return 1
    _emit({"stage": "done", "ok": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
