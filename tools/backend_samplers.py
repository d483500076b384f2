"""llama.cpp's backend samplers against the engine's host top-k, on one draft step.

    python tools/backend_samplers.py DRAFT.gguf [--steps 300] [--top-k 40] [--threads 2]

A sampled draft step needs the row's top-k candidates and their logits. The engine
reads the whole row that llama.cpp hands over and takes the top-k on the host
(``sampling.top_n``, from the row's column maxima). llama.cpp 0.3.36 can instead run a
sampler chain inside the model's graph (``llama_set_sampler``, experimental): the graph
then ends in a top-k, and only the k candidates and their logits come back.

Either way the draft's q is what its token is drawn from, so the target's output is
unchanged (the acceptance rule is exact for any q). The question is only speed. Two
copies of the draft are loaded, one with the backend chain [top-k], and decode the same
tokens, step by step in turn, so a change in the machine's load falls on both alike.
Each step's time counts the decode and the reading of the candidates. The sets of
candidates are compared too (ties at the k-th place may differ; the count is printed).

Measurement only: the app does not attach backend samplers (on this project's 2-core
CPU they measured slower; docs/host-costs.md). This tool calls llama.cpp directly for
the sampler; it loads the model through the app's backend.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llama_cpp as ll  # noqa: E402

from app.backends.llama.backend import LlamaBackend  # noqa: E402
from app.engine.speculation import sampling  # noqa: E402


def backend_top_k(model: LlamaBackend, k: int) -> object:
    """Attach the chain [top-k] to sequence 0 of ``model``'s context; returns the chain
    (it must outlive the context)."""
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(k))
    if not ll.llama_set_sampler(model._ctx, 0, chain):
        raise SystemExit("llama.cpp would not run this sampler chain on the model's device")
    return chain


def read_candidates(model: LlamaBackend) -> tuple[np.ndarray, np.ndarray]:
    ctx = model._ctx
    n = ll.llama_get_sampled_candidates_count_ith(ctx, 0)
    ids_ptr, logits_ptr = ll.llama_get_sampled_candidates_ith(ctx, 0), ll.llama_get_sampled_logits_ith(ctx, 0)
    if not n or not ids_ptr or not logits_ptr:
        raise SystemExit("llama.cpp returned no sampled candidates")
    return (np.ctypeslib.as_array(ids_ptr, shape=(n,)).copy(),
            np.ctypeslib.as_array(logits_ptr, shape=(n,)).copy())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("draft")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    host = LlamaBackend(a.draft, n_ctx=a.steps + 64, n_threads=a.threads)
    device = LlamaBackend(a.draft, n_ctx=a.steps + 64, n_threads=a.threads)
    chain = backend_top_k(device, a.top_k)
    tokens = [int(t) for t in np.random.default_rng(0).integers(300, min(20_000, host.n_vocab), a.steps + 8)]
    host.evaluate(tokens[:8], [7], borrow=True)
    device.evaluate(tokens[:8], [7], borrow=True)
    host_ms, device_ms, same = [], [], 0
    for token in tokens[8:]:
        started = time.perf_counter()
        row = host.evaluate([token], [0], borrow=True)[0]
        host_ids = sampling.top_n(row, a.top_k)
        middle = time.perf_counter()
        device.evaluate([token], [0], borrow=True)
        device_ids, _ = read_candidates(device)
        ended = time.perf_counter()
        host_ms.append(1000 * (middle - started))
        device_ms.append(1000 * (ended - middle))
        same += set(host_ids.tolist()) == set(device_ids.tolist())
    print(f"{Path(a.draft).name}: {len(host_ms)} steps, top-k {a.top_k}, {a.threads} threads")
    print(f"  host top-k (engine):   median {statistics.median(host_ms):6.2f} ms a step, mean {statistics.mean(host_ms):6.2f}")
    print(f"  backend top-k:         median {statistics.median(device_ms):6.2f} ms a step, mean {statistics.mean(device_ms):6.2f}")
    print(f"  same candidate sets:   {same}/{len(host_ms)}")
    device.close()
    host.close()
    ll.llama_sampler_free(chain)


if __name__ == "__main__":
    main()
