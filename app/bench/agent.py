"""``tandem bench --workload agent``: multi-turn editing sessions replayed through the
HTTP API, as an agent drives it.

Each session (``resources/agent_sessions.jsonl``, written for Tandem) hands the model
code or text and then asks, turn after turn, for an edit of it; every turn resends the
whole history, as an agent does, with the model's own earlier replies in it. Each
session is replayed twice, with speculation and without (``"tandem": {"speculative":
false}``), greedy, so both replays write the same text; which goes first alternates
from session to session, so drift in machine load hits both alike. Before each replay
one unrelated one-token request clears the shared KV prefix, so both start cold.
Reported per mode: decode tokens/s (the server's figure: tokens / time after the
prompt; the median over turns), time to first token as the client sees it (first turn
and later turns apart), the share of prompt tokens the KV cache already held,
acceptance and tokens per round.

The server is Tandem's own (``app.server``), started in this process on a free port
of 127.0.0.1 with the bench's models and draft settings; ``--url`` replays against one
already running instead (``tandem serve``, or the window's Local server).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from app.errors import TandemError
from app.terminal.prompt_files import read_jsonl, text_field

SESSIONS = Path(__file__).resolve().parents[1] / "resources" / "agent_sessions.jsonl"
MODES = ("speculative", "plain")
REQUEST_SECONDS = 1800  # one turn on a slow machine; a hang guard, not a measurement


class AgentBenchError(TandemError):
    pass


def read_sessions(path: Path = SESSIONS, limit: int | None = None) -> list[dict]:
    def parse(record: dict) -> dict:
        turns = [text_field(t) for t in record["turns"]]
        if not turns:
            raise ValueError("no turns")
        return {"id": text_field(record.get("id", "session")), "system": text_field(record.get("system", "")),
                "turns": turns}

    sessions = read_jsonl(path, parse, error=AgentBenchError, expected='{"id", "system", "turns": [...]}')
    return sessions[:limit] if limit else sessions


def turn(http, url: str, messages: list[dict], max_tokens: int, speculative: bool) -> dict:
    body = {"model": "tandem", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "tandem": {"speculative": speculative}}
    started = time.perf_counter()
    first, text, final, usage = None, [], {}, {}
    with http.stream("POST", url + "/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise AgentBenchError(f"the server answered {response.status_code}: {response.read()[:300]!r}")
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


def replay(http, url: str, session: dict, turns: int, max_tokens: int, speculative: bool) -> list[dict]:
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
    def total(part: str, key: str, later: bool = False) -> float:
        return sum(r[part].get(key, 0) for r in results if r["turn"] > 0 or not later)

    def cached(later: bool = False) -> int:
        return sum(r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
                   for r in results if r["turn"] > 0 or not later)

    tokens, decode_ms = total("usage", "completion_tokens"), total("timings", "predicted_ms")
    prompt, later_prompt = total("usage", "prompt_tokens"), total("usage", "prompt_tokens", later=True)
    drafted, accepted, rounds = (total("tandem", key) for key in ("drafted", "accepted", "rounds"))
    first = [r["ttft"] for r in results if r["turn"] == 0]
    later = [r["ttft"] for r in results if r["turn"] > 0]
    # Medians over turns: a moment of load elsewhere on the machine slows one turn, not all.
    speeds = [r["timings"].get("predicted_per_second", 0.0) for r in results]
    return {"turns": len(results), "completion_tokens": tokens,
            "tokens_per_second": round(statistics.median(speeds), 2) if speeds else 0.0,
            "tokens_per_second_overall": round(tokens / decode_ms * 1000, 2) if decode_ms else 0.0,
            "ttft_first_turn_s": round(statistics.median(first), 3) if first else None,
            "ttft_later_turns_s": round(statistics.median(later), 3) if later else None,
            "prompt_tokens": prompt, "cached_tokens": cached(),
            "prompt_reused": round(cached() / prompt, 3) if prompt else 0.0,
            "prompt_reused_later_turns": round(cached(later=True) / later_prompt, 3) if later_prompt else 0.0,
            "acceptance": round(accepted / drafted, 3) if drafted else None,
            "tokens_per_round": round(tokens / rounds, 2) if rounds else None}


def run_agent_bench(url: str, sessions: list[dict], turns: int, max_tokens: int, log=None) -> dict:
    import httpx

    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    identical = True
    with httpx.Client(timeout=REQUEST_SECONDS) as http:
        for number, session in enumerate(sessions):
            order = MODES if number % 2 == 0 else MODES[::-1]
            texts = {}
            for mode in order:
                replayed = replay(http, url, session, turns, max_tokens, mode == "speculative")
                results[mode] += replayed
                texts[mode] = [r["text"] for r in replayed]
                if log:
                    log(f"{session['id']:<14} {mode:<11} " + " ".join(
                        f"{r['usage'].get('completion_tokens', 0)}tok@{r['timings'].get('predicted_per_second', 0):.1f}/s,"
                        f"ttft {r['ttft']:.2f}s" for r in replayed))
            identical &= texts["speculative"] == texts["plain"]
    report = {mode: summary(rs) for mode, rs in results.items()}
    plain, spec = report["plain"]["tokens_per_second"], report["speculative"]["tokens_per_second"]
    report["speedup"] = round(spec / plain, 2) if plain else None
    report["identical_text"] = identical
    return report


def format_agent_table(report: dict) -> str:
    lines = [f"{'':<12} {'tok/s':>7} {'TTFT 1st':>9} {'TTFT later':>11} {'reused':>7} {'later':>7} "
             f"{'accept':>7} {'tok/round':>9}"]
    for mode in MODES:
        r = report[mode]
        accept = r["acceptance"] if r["acceptance"] is not None else "-"
        lines.append(f"{mode:<12} {r['tokens_per_second']:>7.1f} {r['ttft_first_turn_s'] or 0:>8.2f}s "
                     f"{r['ttft_later_turns_s'] or 0:>10.2f}s {r['prompt_reused']:>7.1%} "
                     f"{r['prompt_reused_later_turns']:>7.1%} {accept:>7} {r['tokens_per_round'] or '-':>9}")
    lines.append(f"speed-up {report['speedup']}x over {report['speculative']['turns']} turns; "
                 f"identical text: {'yes' if report['identical_text'] else 'no'}")
    return "\n".join(lines)


@contextmanager
def local_server(args: argparse.Namespace, spec):
    """Tandem's API on a free port of 127.0.0.1, serving the bench's models; yields its /v1 address."""
    from app.engine.types import SamplingConfig
    from app.server.api import create_app
    from app.server.listening import BackgroundServer
    from app.server.requests import Defaults
    from app.server.worker import EngineWorker
    from app.terminal.shared import TerminalProgress, load

    worker = EngineWorker(lambda: load(args, TerminalProgress()))
    server = None
    try:
        session = worker.start()
        info = session.info
        if not info.speculation_available:
            raise AgentBenchError(f"Nothing to compare: {info.note or 'no draft for this target'}")
        defaults = Defaults(sampling=SamplingConfig(temperature=0.0), spec=spec, max_tokens_limit=session.target.n_ctx)
        server = BackgroundServer(create_app(worker, model_id=info.target_name, defaults=defaults, info=info), worker)
        url = server.start("127.0.0.1", 0)
        print(f"serving {info.target_name} + {info.draft_name or info.drafter.value} on {url}", file=sys.stderr)
        yield url
    finally:
        if server is not None:
            server.stop()
        worker.stop()


NOT_FOR_AGENT = {"prompts": None, "categories": None, "busy": 0, "repeat": None, "chart": None}


def cmd_agent_bench(args: argparse.Namespace, draft_settings: list) -> int:
    """``draft_settings``: the bench's parsed ``--draft-max``; the agent bench runs one."""
    from app.session.config import speculation

    for name, unset in NOT_FOR_AGENT.items():
        if getattr(args, name) != unset:
            raise AgentBenchError(f"--{name} does not apply to --workload agent")
    if len(draft_settings) != 1 or args.copy == "both":
        raise AgentBenchError("--workload agent runs one draft setting: one --draft-max, --copy on or off")
    spec = speculation(True, draft_settings[0], copy=args.copy == "on")
    sessions = read_sessions(limit=args.limit)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.url:
        report = run_agent_bench(args.url.rstrip("/"), sessions, args.turns, args.max_tokens, log)
    else:
        with local_server(args, spec) as url:
            report = run_agent_bench(url, sessions, args.turns, args.max_tokens, log)
    print(json.dumps(report) if args.json else format_agent_table(report))
    return 0
