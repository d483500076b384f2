"""The agent-loop benchmark: multi-turn editing sessions replayed through the HTTP API.

    python tools/agent_bench.py [--sessions 5] [--turns 4] [--max-tokens 160] [-- SERVE OPTIONS]
    python tools/agent_bench.py --url http://127.0.0.1:8080/v1        # a server already running

Each session (app/resources/agent_sessions.jsonl, written for Tandem) hands the model
code or text and then asks, turn after turn, for an edit of it; every turn resends the
whole history, as an agent does, with the model's own earlier replies in it. Each
session is replayed twice, with speculation (the server's default) and without
(``"tandem": {"speculative": false}``), greedy, so both replays write the same text.
Before each replay one unrelated one-token request clears the shared KV prefix, so
both start cold. Reported per mode: decode tokens/s (the server's figure: tokens
/ time after the prompt; the median over turns), time to first token as the client sees it
(first turn and later turns apart), the share of prompt tokens the KV cache already
held, acceptance and tokens per round.

Without ``--url`` it starts ``python -m app serve --port 0`` with the options after
``--`` and stops it at the end. Not a test: the figures depend on the machine and
its load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = ROOT / "app" / "resources" / "agent_sessions.jsonl"
ADDRESS = re.compile(r"Tandem API: (http://\S+/v1)")
MODES = ("speculative", "plain")


def start_server(options: list[str]) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    process = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", "0", *options],
                               stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    for line in process.stdout:
        match = ADDRESS.search(line)
        if match:
            for ready in process.stdout:
                if ready.startswith("Ready:"):
                    print(ready.strip(), file=sys.stderr)
                    return process, match.group(1)
    raise SystemExit(f"agent_bench: tandem serve did not start (exit {process.wait()})")


def turn(http: httpx.Client, url: str, messages: list[dict], max_tokens: int, speculative: bool) -> dict:
    body = {"model": "tandem", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "tandem": {"speculative": speculative}}
    started = time.perf_counter()
    first, text, final, usage = None, [], {}, {}
    with http.stream("POST", url + "/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise SystemExit(f"agent_bench: the server answered {response.status_code}: {response.read()[:300]!r}")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                content = choice.get("delta", {}).get("content")
                if content:
                    first = first or time.perf_counter()
                    text.append(content)
                if choice.get("finish_reason"):
                    final = chunk
    return {"text": "".join(text), "ttft": (first or time.perf_counter()) - started, "usage": usage,
            "tandem": final.get("tandem", {}), "timings": final.get("timings", {})}


def replay(http: httpx.Client, url: str, session: dict, turns: int, max_tokens: int, speculative: bool) -> list[dict]:
    # A cold start: the KV cache now holds an unrelated prompt, not this session's.
    http.post(url + "/completions", json={"prompt": f"Cold start {time.time()}", "max_tokens": 1}).raise_for_status()
    messages = [{"role": "system", "content": session["system"]}]
    results = []
    for index, request in enumerate(session["turns"][:turns]):
        messages.append({"role": "user", "content": request})
        result = turn(http, url, messages, max_tokens, speculative)
        result["turn"] = index
        results.append(result)
        messages.append({"role": "assistant", "content": result["text"]})
    return results


def summary(results: list[dict]) -> dict:
    tokens = sum(r["usage"].get("completion_tokens", 0) for r in results)
    decode_ms = sum(r["timings"].get("predicted_ms", 0.0) for r in results)
    prompt = sum(r["usage"].get("prompt_tokens", 0) for r in results)
    cached = sum(r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for r in results)
    drafted = sum(r["tandem"].get("drafted", 0) for r in results)
    accepted = sum(r["tandem"].get("accepted", 0) for r in results)
    rounds = sum(r["tandem"].get("rounds", 0) for r in results)
    later_prompt = sum(r["usage"].get("prompt_tokens", 0) for r in results if r["turn"] > 0)
    later_cached = sum(r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
                       for r in results if r["turn"] > 0)
    first = [r["ttft"] for r in results if r["turn"] == 0]
    later = [r["ttft"] for r in results if r["turn"] > 0]
    # Medians over turns: a moment of load elsewhere on the machine slows one turn, not all.
    speeds = [r["timings"].get("predicted_per_second", 0.0) for r in results]
    return {"turns": len(results), "completion_tokens": tokens,
            "tokens_per_second": round(statistics.median(speeds), 2) if speeds else 0.0,
            "tokens_per_second_overall": round(tokens / decode_ms * 1000, 2) if decode_ms else 0.0,
            "ttft_first_turn_s": round(statistics.median(first), 3) if first else None,
            "ttft_later_turns_s": round(statistics.median(later), 3) if later else None,
            "prompt_tokens": prompt, "cached_tokens": cached,
            "prompt_reused": round(cached / prompt, 3) if prompt else 0.0,
            "prompt_reused_later_turns": round(later_cached / later_prompt, 3) if later_prompt else 0.0,
            "acceptance": round(accepted / drafted, 3) if drafted else None,
            "tokens_per_round": round(tokens / rounds, 2) if rounds else None}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    serve_options = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server's /v1 address (default: start one)")
    parser.add_argument("--sessions", type=int, default=5, help="how many sessions to replay (default: all 5)")
    parser.add_argument("--turns", type=int, default=4, help="most turns per session (default: 4)")
    parser.add_argument("--max-tokens", type=int, default=160, help="most tokens per reply (default: 160)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    sessions = [json.loads(line) for line in SESSIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    sessions = sessions[:args.sessions]
    process, url = (None, args.url) if args.url else start_server(serve_options)
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    identical = True
    try:
        with httpx.Client(timeout=1800) as http:
            for number, session in enumerate(sessions):
                # Alternate which mode goes first, so drift in machine load hits both alike.
                order = MODES if number % 2 == 0 else MODES[::-1]
                texts = {}
                for mode in order:
                    replayed = replay(http, url, session, args.turns, args.max_tokens, mode == "speculative")
                    results[mode] += replayed
                    texts[mode] = [r["text"] for r in replayed]
                    print(f"{session['id']:<14} {mode:<11} " + " ".join(
                        f"{r['usage'].get('completion_tokens', 0)}tok@{r['timings'].get('predicted_per_second', 0):.1f}/s,"
                        f"ttft {r['ttft']:.2f}s" for r in replayed),
                        file=sys.stderr)
                identical &= texts["speculative"] == texts["plain"]
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)
            process.wait(60)
    report = {mode: summary(rs) for mode, rs in results.items()}
    plain, spec = report["plain"]["tokens_per_second"], report["speculative"]["tokens_per_second"]
    report["speedup"] = round(spec / plain, 2) if plain else None
    report["identical_text"] = identical
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{'':<12} {'tok/s':>7} {'TTFT 1st':>9} {'TTFT later':>11} {'reused':>7} {'later':>7} {'accept':>7} {'tok/round':>9}")
    for mode in MODES:
        r = report[mode]
        print(f"{mode:<12} {r['tokens_per_second']:>7.1f} {r['ttft_first_turn_s']:>8.2f}s {r['ttft_later_turns_s'] or 0:>10.2f}s"
              f" {r['prompt_reused']:>7.1%} {r['prompt_reused_later_turns']:>7.1%} {r['acceptance'] if r['acceptance'] is not None else '-':>7}"
              f" {r['tokens_per_round'] or '-':>9}")
    print(f"speed-up {report['speedup']}x over {report['speculative']['turns']} turns; "
          f"identical text: {'yes' if identical else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
