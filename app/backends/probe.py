"""Does this llama.cpp build run on this machine? Decode a tiny quantised model and see.

A llama.cpp build can compile fine and still die on its first matrix product: on
some Xeons with AMX, llama.cpp's AMX kernels execute a tile instruction without a
tile configuration and the process gets SIGILL (every quantised model; F32 runs).
Nothing can catch that inside the process, so the probe is meant to run in a
child (``python -m app --probe-llama``; ``app.build_check`` does that) and the
parent reads how it ended.

The model is written here with the ``gguf`` package: a two-layer llama with random
weights in Q4_0 and Q8_0 (the types llama.cpp's AMX path takes), dimensions that
are multiples of 32 so those kernels are chosen, and a byte-fallback vocabulary, so
the probe needs no download. It decodes a batch of 12 tokens and then 4 single
tokens with the default thread count, on the GPU too where the build has one, and
checks that every logit it asked for is finite. It also says whether the build has
llama.cpp's RPC backend (``tandem worker``, ``--rpc``): set-up builds every variant with
it and counts a variant built with it that lacks it as failed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

N_EMBD, N_FF, N_LAYER, N_HEAD = 64, 128, 2, 4
SPECIALS = ["<unk>", "<s>", "</s>"]
N_VOCAB = 288  # 3 specials + 256 byte tokens + filler, a multiple of 32
BATCH = 12
SINGLES = 4
# Set in the child's environment by tests: the child kills itself with this signal
# just before its first decode, standing in for a build that dies there.
SIMULATE_ENV = "TANDEM_PROBE_SIMULATE_SIGNAL"


def write_probe_model(path: Path) -> Path:
    """A small, valid, quantised llama GGUF with seeded random weights."""
    import gguf
    from gguf.quants import quantize

    Q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(19)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tandem-probe")
    writer.add_context_length(256)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    tokens = SPECIALS + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"w{i}" for i in range(N_VOCAB - len(tokens))]
    types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.BYTE] * 256
    types += [gguf.TokenType.NORMAL] * (N_VOCAB - len(types))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * N_VOCAB)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)

    def matrix(name: str, rows: int, cols: int, qtype) -> None:
        weights = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        writer.add_tensor(name, quantize(weights, qtype), raw_dtype=qtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(N_EMBD, dtype=np.float32))

    matrix("token_embd.weight", N_VOCAB, N_EMBD, Q.Q8_0)
    for i in range(N_LAYER):
        norm(f"blk.{i}.attn_norm.weight")
        for part in ("q", "k", "v", "output"):
            matrix(f"blk.{i}.attn_{part}.weight", N_EMBD, N_EMBD, Q.Q4_0)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD, Q.Q8_0)
        matrix(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD, Q.Q4_0)
        matrix(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF, Q.Q8_0)
    norm("output_norm.weight")
    matrix("output.weight", N_VOCAB, N_EMBD, Q.Q4_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def run_probe(gpu_layers: int = -1) -> dict:
    """Load the probe model and decode; returns what was seen (only if the process survives)."""
    from app.backends.llama import rpc
    from app.backends.llama.backend import LlamaBackend
    from app.backends.llama.process_setup import default_threads, system_info

    started = time.perf_counter()
    info = system_info()
    # Said before the first decode, so a parent can tell what a build that died had in it.
    _emit({"stage": "loaded", "system_info": info["system_info"], "backend": info["backend"]})
    with tempfile.TemporaryDirectory(prefix="tandem-probe-") as scratch:
        model = LlamaBackend(write_probe_model(Path(scratch) / "probe.gguf"), n_ctx=64,
                             n_gpu_layers=gpu_layers, flash_attention="auto")
        try:
            simulated = os.environ.get(SIMULATE_ENV)
            if simulated:
                os.kill(os.getpid(), getattr(signal, simulated))
            prompt = [(7 * i + 5) % N_VOCAB for i in range(BATCH)]
            rows = [model.evaluate(prompt, list(range(BATCH)))]
            for token in range(SINGLES):
                rows.append(model.evaluate([40 + token], [0]))
            finite = all(np.isfinite(np.asarray(r)).all() for r in rows)
        finally:
            model.close()
    return {"stage": "done", "ok": bool(finite), "finite": bool(finite), "threads": default_threads(),
            "backend": info["backend"], "amx": "AMX_INT8 = 1" in info["system_info"], "rpc": rpc.available(),
            "seconds": round(time.perf_counter() - started, 3)}


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    gpu_layers = int(args[args.index("--gpu-layers") + 1]) if "--gpu-layers" in args else -1
    try:
        result = run_probe(gpu_layers)
    except Exception as exc:  # noqa: BLE001 - the parent wants one line, whatever it was
        _emit({"stage": "done", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    _emit(result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
