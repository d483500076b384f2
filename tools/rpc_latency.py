"""Tandem plain and speculative with the target split over two RPC workers, behind delaying
proxies (tools/delay_proxy.py), at several added round-trip times; RPC round trips per token
counted by the proxies. The draft runs here, with no network.

    python tools/rpc_latency.py                                  # 0, 0.5, 2, 10 ms; 128 tokens
    python tools/rpc_latency.py --rtt-ms 0,2 --max-tokens 32     # a short run
    python tools/rpc_latency.py --json results.json

Two ``tandem worker`` processes start on 127.0.0.1 (``--worker-threads`` each); one
engine process loads the demo pair (or --target/--draft) with its target over the two
proxies, once, and each added RTT is set on the proxies between replies. For each RTT and
mode it prints tokens/s of the reply (the engine's own figure) and the proxies' round
trips per generated token. The local line (no workers) is the reference. Not a test:
the figures need a quiet machine (and on one machine, the workers share its cores).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))

PROMPT = (("user", "Write a Python function that reverses a linked list, and explain it."),)


def main() -> int:
    from app.engine.types import SamplingConfig, SpecConfig
    from app.session.config import ModelSpec
    from app.session.engine_session import EngineSession
    from delay_proxy import DelayProxy
    from rpc_workers import tandem_env, workers

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rtt-ms", default="0,0.5,2,10", help="added round-trip times, ms (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--draft-max", default="5", help="draft length, or auto (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="the engine's threads (default: %(default)s)")
    parser.add_argument("--worker-threads", type=int, default=1)
    parser.add_argument("--target", default="", help="target GGUF (default: the demo target)")
    parser.add_argument("--draft", default="", help="draft GGUF (default: the demo draft)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rtts = [float(x) for x in args.rtt_ms.split(",")]
    draft_max = args.draft_max if args.draft_max == "auto" else int(args.draft_max)
    greedy = SamplingConfig(temperature=0.0, ignore_eos=True)
    modes = {"plain": SpecConfig(enabled=False), "speculative": SpecConfig(draft_max=draft_max)}
    base = dict(target_path=args.target, draft_path=args.draft, n_ctx=2048, n_threads=args.threads)
    rows: list[dict] = []

    def run(engine, label: str, rtt, proxies=()) -> None:
        for mode, spec in modes.items():
            # Warm-up, not counted: a context's first decodes set up buffers and graphs
            # (on a worker: a dozen more trips), which the first measured reply would carry.
            for _ in engine.reply(PROMPT, greedy, spec, 8):
                pass
            before = sum(p.counts.snapshot()["trips"] for p in proxies)
            tokens = sum(1 for _ in engine.reply(PROMPT, greedy, spec, args.max_tokens))
            trips = sum(p.counts.snapshot()["trips"] for p in proxies) - before
            stats = engine.stats
            row = {"setup": label, "rtt_ms": rtt, "mode": mode, "tokens": tokens,
                   "tokens_per_second": round(stats.tokens_per_second, 2),
                   "trips_per_token": round(trips / tokens, 2) if proxies else None,
                   "tokens_per_round": round(stats.tokens_per_round, 2) if stats.speculative else None}
            rows.append(row)
            print(f"{label:<10} {'' if rtt is None else f'+{rtt:g} ms':>8}  {mode:<12} "
                  f"{row['tokens_per_second']:7.2f} tok/s"
                  + (f"  {row['trips_per_token']:5.2f} trips/token" if proxies else "")
                  + (f"  {row['tokens_per_round']:.2f} tokens/round" if row["tokens_per_round"] else ""), flush=True)

    env = tandem_env()
    local = EngineSession(env=env)
    try:
        local.load(ModelSpec(**base))
        run(local, "local", None)
    finally:
        local.close()
    with workers(2, threads=args.worker_threads) as started:
        proxies = [DelayProxy(("127.0.0.1", w.port), 0.0).start() for w in started]
        engine = EngineSession(env=env)
        try:
            engine.load(ModelSpec(**base, rpc_workers=tuple(p.endpoint for p in proxies)))
            for rtt in rtts:
                for proxy in proxies:
                    proxy.set_rtt(rtt)
                run(engine, "2 workers", rtt, proxies)
        finally:
            engine.close()
            for proxy in proxies:
                proxy.close()
    print("\nspeed-up of speculation over plain decoding:")
    for setup_rtt in sorted({(r["setup"], r["rtt_ms"]) for r in rows}, key=lambda k: (k[1] is not None, k[1] or 0)):
        pair = {r["mode"]: r for r in rows if (r["setup"], r["rtt_ms"]) == setup_rtt}
        label = setup_rtt[0] + ("" if setup_rtt[1] is None else f" +{setup_rtt[1]:g} ms")
        print(f"  {label:<20} {pair['speculative']['tokens_per_second'] / pair['plain']['tokens_per_second']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
