"""A trial load of one model file, meant to run in a child process.

``python -m app --check-model PATH`` (``app.backends.model_check`` starts it) loads
the model as Tandem would, on the CPU, tokenizes text that reaches every tokenizer
path (bytes outside the vocabulary, special-token syntax, with and without the
special tokens the vocabulary adds), decodes one small batch and one single token,
and checks the logits are finite. A file that makes llama.cpp abort, or throw past
its C API, kills this process instead of the app; the parent reads how it ended.

Output: one JSON object per line on stdout (``stage`` loading / tokenizing / decoding /
done);
llama.cpp's warnings and errors on stderr, where an abort's own message lands too.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

TRIAL_CTX = 128       # tokens: the KV cache stays tiny whatever the model
TRIAL_BATCH = 4       # prompt tokens decoded in one batch (logits at every position) ...
TRIAL_SINGLES = 1     # ... then a greedy single-token step, as generation does
PROGRESS_STEP = 0.02  # llama.cpp reports per tensor; the parent needs a few steps

# Text for every tokenizer path: ASCII and whitespace, accents, CJK, an emoji (4-byte
# UTF-8), a NUL and other control bytes, a zero-width joiner, and special-token syntax.
SAMPLES = (
    "Hello, world! 123\n\tTabs and  spaces.\r\n",
    "Ünïcödé café naïve, 中文字符, русский, العربية, 🙂👍🏽\u200d, \x00\x01\x7f\u00a0\ufeff",
    "<|im_start|>user\n<s></s><unk>[INST]<|endoftext|><|im_end|>\n",
    " ",
    # Every ASCII character and the rest of the two-byte range's start, one after another:
    # normalizers and tries walk byte by byte.
    "".join(chr(c) for c in range(1, 0x300)),
)


def run_trial(path: Path) -> dict:
    """Load, tokenize, decode; returns what was seen (only if the process survives)."""
    from app.backends.llama.backend import LlamaBackend
    from app.backends.llama.process_setup import default_threads

    started = time.perf_counter()
    last = [-1.0]

    def progress(fraction: float) -> bool:
        if fraction - last[0] >= PROGRESS_STEP or fraction >= 1.0:
            last[0] = fraction
            _emit({"stage": "loading", "fraction": round(fraction, 3)})
        return True

    # The CPU only: what llama.cpp asserts about a file does not depend on the device,
    # and a GPU may be busy with the models the parent has loaded. Half the threads:
    # the parent may be busy too, and llama.cpp's spinning workers slow to a crawl
    # when they outnumber free cores (a 16-token batch of the 135M demo model took
    # 4.5 s with 2 threads on 2 busy cores, 0.3 s with 1).
    _emit({"stage": "loading", "fraction": 0.0})
    if _reads_a_target(path):
        return _drafter_trial(path, started)
    model = LlamaBackend(path, n_ctx=TRIAL_CTX, n_gpu_layers=0, n_threads=max(1, default_threads() // 2),
                         progress=progress)
    try:
        # Each step said before it runs: the parent tells a slow step from a hung one.
        _emit({"stage": "tokenizing", "n_vocab": model.n_vocab})
        prompt: list[int] = []
        for text in SAMPLES:
            for add_special in (True, False):
                for parse_special in (True, False):
                    ids = model.tokenize(text, add_special=add_special, parse_special=parse_special)
                    for token in ids:
                        if 0 <= token < model.n_vocab:
                            model.token_bytes(token)
                            model.token_text(token)
                    if add_special and not parse_special:
                        prompt += ids
        prompt = [t for t in prompt if 0 <= t < model.n_vocab][:TRIAL_BATCH] or [0]
        _emit({"stage": "decoding", "tokens": len(prompt)})
        rows = [model.evaluate(prompt, list(range(len(prompt))))]
        for _ in range(TRIAL_SINGLES):
            rows.append(model.evaluate([int(np.argmax(rows[-1][-1]))], [0]))
        finite = all(bool(np.isfinite(r).all()) for r in rows)
    finally:
        model.close()
    result = {"stage": "done", "ok": finite, "seconds": round(time.perf_counter() - started, 3)}
    if not finite:
        result["error"] = "llama.cpp computed non-finite logits (NaN or infinity) for it"
    return result


def _reads_a_target(path: Path) -> bool:
    """A drafter file that reads its target's layers (EAGLE-3): it runs only beside its
    target, so its trial is the load alone (its context needs the target's)."""
    from app.engine.gguf.model_file import open_model_file

    return open_model_file(path).metadata.architecture == "eagle3"


def _drafter_trial(path: Path, started: float) -> dict:
    from app.backends.llama.eagle_head import drafter_layers
    from app.engine.gguf.draft_heads import EAGLE3_LAYERS

    layers = drafter_layers(path)
    result = {"stage": "done", "ok": len(layers) == EAGLE3_LAYERS, "seconds": round(time.perf_counter() - started, 3)}
    if not result["ok"]:
        result["error"] = f"llama.cpp reads {len(layers)} target layers from it, not {EAGLE3_LAYERS}"
    return result


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m app --check-model PATH", file=sys.stderr)
        return 2
    # llama.cpp's complaints on stderr, where the parent looks for its last words.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    llama_log = logging.getLogger("tandem.llama")
    llama_log.addHandler(handler)
    llama_log.setLevel(logging.WARNING)
    llama_log.propagate = False
    try:
        result = run_trial(Path(args[0]))
    except Exception as exc:  # noqa: BLE001 - the parent wants one line, whatever it was
        from app.errors import TandemError

        error = str(exc) if isinstance(exc, TandemError) else f"{type(exc).__name__}: {exc}"
        _emit({"stage": "done", "ok": False, "error": error})
        return 1
    _emit(result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
