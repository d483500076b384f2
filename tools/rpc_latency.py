"""Tandem plain and speculative with the target split over two RPC workers, behind delaying
proxies (tools/delay_proxy.py), at several added round-trip times, beside llama.cpp's own
``llama-server --rpc`` on the same workers; RPC round trips per token counted by the
proxies. The draft runs here, with no network, in both.

    python tools/rpc_latency.py                                  # 0, 0.5, 2, 10 ms; 128 tokens
    python tools/rpc_latency.py --rtt-ms 0,2 --max-tokens 32     # a short run
    python tools/rpc_latency.py --server PATH/llama-server --json results.json   # the table

Two ``tandem worker`` processes start on 127.0.0.1 (``--worker-threads`` each); one
engine process loads the demo pair (or --target/--draft) with its target over the two
proxies, once, and each added RTT is set on the proxies between replies. For each RTT and
mode it prints tokens/s of the reply (the engine's own figure, prompt excluded) and the
proxies' round trips per generated token. The local line (no workers) is the reference.

With ``--server`` (a llama-server built from the same llama.cpp, with RPC on), the engine
is closed (a worker serves one client at a time) and llama-server is started twice with
``--rpc`` on the same proxies: plain, then with ``-md DRAFT --spec-type draft-simple``.
Its layers go where Tandem's go: llama.cpp puts RPC devices first, then this machine's
GPUs, and ``-ngl 99`` sends every layer to them, split by the devices' free memory (the
token embeddings stay on this CPU in both); ``-devd none -ngld 0`` keeps its draft here.
Its figures are the server's own ``timings`` (decode only), greedy, with the same
prompt (rendered by the server's own template), tokens, threads, context and flash
attention (off: Tandem's choice for a CPU or a worker), on Tandem's own ggml libraries
(``tandem_ggml``; --server-own-ggml for the build's). Before each measured reply both
run one short warm-up reply on the same prompt, so the measured one reuses the prompt's
cache, and the trips counted are the decode's.

Prints the table as markdown at the end; --json writes every row. Not a test: the
figures need a quiet machine (and on one machine, the workers share its cores).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))

PROMPT = (("user", "Write a Python function that reverses a linked list, and explain it."),)
N_CTX = 2048
WARM_UP_TOKENS = 8
SERVER_READY_S = 300.0  # a deadline for a start that went wrong (a model over two workers), not a speed


# --- llama-server -------------------------------------------------------------------------

GGML_LIBS = ("libggml.so.0", "libggml-base.so.0", "libggml-cpu.so.0", "libggml-rpc.so.0")


def tandem_ggml() -> Path:
    """A folder of links to the ggml libraries Tandem's llama-cpp-python loads, for
    llama-server's LD_LIBRARY_PATH (it wins over the binary's RUNPATH). Both then run
    the same CPU kernels, built with the same flags, and speak the same RPC protocol by
    construction: the comparison is of the decoding loops, not of two builds. (A build of
    its own can also die with SIGILL in the draft's quantised kernels when it was compiled
    for CPU features this one lacks, as AVX-VNNI on an AVX-512 EPYC.)"""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")  # its path only: this process loads no llama.cpp
    lib = Path(spec.submodule_search_locations[0]) / "lib"
    folder = Path(tempfile.mkdtemp(prefix="rpc-latency-ggml-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for name in GGML_LIBS:
        if not (lib / name).is_file():
            raise SystemExit(f"no {name} in {lib}: pass --server-own-ggml to use llama-server's own")
        (folder / name).symlink_to(lib / name)
    return folder


class Server:
    """One llama-server on 127.0.0.1, its layers on ``rpc`` (host:port, …) when given."""

    def __init__(self, binary: str, target: str, *, threads: int, rpc: tuple[str, ...] = (),
                 draft: str = "", draft_max: int = 5, ggml: Path | None = None) -> None:
        from rpc_workers import free_port

        self.port = free_port()
        cmd = [binary, "-m", target, "--port", str(self.port), "-t", str(threads), "-tb", str(threads),
               "-c", str(N_CTX), "-np", "1", "--no-webui", "-fa", "off", "-fit", "off"]
        if rpc:
            cmd += ["--rpc", ",".join(rpc), "-ngl", "99"]
        else:
            cmd += ["-ngl", "0"]
        if draft:
            # -md alone loads the draft but does not speculate: the type must be named. The
            # draft's devices follow --device (the workers too) unless told: none keeps it here.
            cmd += ["-md", draft, "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max),
                    "--spec-draft-n-min", "1", "-devd", "none", "-ngld", "0",
                    "-td", str(threads), "-tbd", str(threads)]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="rpc-latency-server-", suffix=".log", delete=False)
        env = dict(os.environ, LD_LIBRARY_PATH=str(ggml)) if ggml else None
        self.process = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_READY_S
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise SystemExit(f"llama-server did not start; its log: {self.log.name}\n{self.tail()}")
            time.sleep(0.25)

    def tail(self, lines: int = 15) -> str:
        return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])

    def post(self, route: str, body: dict) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{route}", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=3600) as r:
            return json.loads(r.read())

    def prompt(self, history) -> str:
        """The conversation as the server's own template writes it (the GGUF's, as Tandem's)."""
        return self.post("/apply-template", {"messages": [{"role": r, "content": c} for r, c in history]})["prompt"]

    def reply(self, prompt: str, max_tokens: int) -> dict:
        """Greedy, every token up to ``max_tokens`` (ignore_eos, as Tandem's runs)."""
        out = self.post("/completion", {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "top_k": 1,
                                        "samplers": ["top_k"], "ignore_eos": True, "cache_prompt": True})
        return {"text": out["content"], **out["timings"]}

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


# --- the runs ---------------------------------------------------------------------------

def trips(proxies) -> int:
    return sum(p.counts.snapshot()["trips"] for p in proxies)


def sent(proxies) -> list[int]:
    return [p.counts.snapshot()["bytes_up"] for p in proxies]


def loaded(system: str, mode: str, before: list[int], proxies, loads: list[dict]) -> None:
    """What the load sent each worker (weights, mostly): the same on both sides when their
    layers were split the same way."""
    mib = [round((after - b) / 2**20, 1) for after, b in zip(sent(proxies), before)]
    loads.append({"system": system, "mode": mode, "mib_to_each_worker": mib})
    print(f"{system} ({mode}) load: {', '.join(f'{m:g} MiB' for m in mib)} to the workers", flush=True)


def main() -> int:
    from app.engine.types import SamplingConfig, SpecConfig
    from app.session.config import ModelSpec
    from app.session.engine_session import EngineSession
    from app.session.loading import resolve_paths
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
    parser.add_argument("--server", default="", help="also llama-server, this binary (built with RPC on)")
    parser.add_argument("--server-draft-max", type=int, default=0,
                        help="llama-server's --spec-draft-n-max (default: --draft-max; 5 when that is auto)")
    parser.add_argument("--server-own-ggml", action="store_true",
                        help="run llama-server on its build's ggml libraries (default: Tandem's, the same kernels)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    try:
        rtts = [float(x) for x in args.rtt_ms.split(",")]
        draft_max = args.draft_max if args.draft_max == "auto" else int(args.draft_max)
    except ValueError:
        parser.error(f"--rtt-ms takes numbers, --draft-max a number or auto: {args.rtt_ms!r}, {args.draft_max!r}")
    if args.server and not Path(args.server).is_file():
        parser.error(f"no llama-server at {args.server}")
    if args.server and args.target and not args.draft:
        parser.error("--server with --target needs --draft too (its speculative run)")
    server_k = args.server_draft_max or (5 if draft_max == "auto" else draft_max)
    ggml = tandem_ggml() if args.server and not args.server_own_ggml else None
    greedy = SamplingConfig(temperature=0.0, ignore_eos=True)
    modes = {"plain": SpecConfig(enabled=False), "speculative": SpecConfig(draft_max=draft_max)}
    base = dict(target_path=args.target, draft_path=args.draft, n_ctx=N_CTX, n_threads=args.threads)
    rows: list[dict] = []
    loads: list[dict] = []

    def record(row: dict) -> None:
        rows.append(row)
        rtt = row["rtt_ms"]
        print(f"{row['system']:<12} {row['setup']:<10} {'' if rtt is None else f'+{rtt:g} ms':>8}  "
              f"{row['mode']:<12} {row['tokens_per_second']:7.2f} tok/s"
              + ("" if row["trips_per_token"] is None else f"  {row['trips_per_token']:5.2f} trips/token")
              + (f"  {row['tokens_per_round']:.2f} tokens/round" if row["tokens_per_round"] else ""), flush=True)

    def run_tandem(engine, label: str, rtt, proxies=()) -> None:
        for mode, spec in modes.items():
            # Warm-up, not counted: a context's first decodes set up buffers and graphs
            # (on a worker: a dozen more trips), which the first measured reply would carry.
            for _ in engine.reply(PROMPT, greedy, spec, WARM_UP_TOKENS):
                pass
            before = trips(proxies)
            events = list(engine.reply(PROMPT, greedy, spec, args.max_tokens))
            counted = trips(proxies) - before
            stats = engine.stats
            record({"system": "tandem", "setup": label, "rtt_ms": rtt, "mode": mode, "tokens": len(events),
                    "tokens_per_second": round(stats.tokens_per_second, 2),
                    "trips_per_token": round(counted / len(events), 2) if proxies else None,
                    "tokens_per_round": round(stats.tokens_per_round, 2) if stats.speculative else None,
                    "text": "".join(e.text for e in events)})

    def run_server(server: Server, label: str, mode: str, rtt, proxies=()) -> None:
        prompt = server.prompt(PROMPT)
        server.reply(prompt, WARM_UP_TOKENS)  # warm-up, as Tandem's; it also caches the prompt
        before = trips(proxies)
        out = server.reply(prompt, args.max_tokens)
        counted = trips(proxies) - before
        n = out["predicted_n"]
        drafted, accepted = out.get("draft_n") or 0, out.get("draft_n_accepted") or 0
        record({"system": "llama-server", "setup": label, "rtt_ms": rtt, "mode": mode, "tokens": n,
                "tokens_per_second": round(out["predicted_per_second"], 2),
                "trips_per_token": round(counted / n, 2) if proxies else None,
                "tokens_per_round": None, "drafted": drafted, "accepted": accepted, "text": out["text"]})

    def server_modes() -> dict[str, dict]:
        return {"plain": {"ggml": ggml}, "speculative": {"draft": draft_path, "draft_max": server_k, "ggml": ggml}}

    env = tandem_env()
    local = EngineSession(env=env)
    try:
        local.load(ModelSpec(**base))
        run_tandem(local, "local", None)
    finally:
        local.close()
    # The files Tandem loaded (the demo pair unless told), for the server too.
    target, draft = resolve_paths(ModelSpec(**base))
    target_path, draft_path = str(target), str(draft or "")
    if args.server:
        for mode, extra in server_modes().items():
            server = Server(args.server, target_path, threads=args.threads, **extra)
            try:
                run_server(server, "local", mode, None)
            finally:
                server.close()
    with workers(2, threads=args.worker_threads) as started:
        proxies = [DelayProxy(("127.0.0.1", w.port), 0.0).start() for w in started]
        try:
            engine = EngineSession(env=env)
            try:
                before = sent(proxies)
                engine.load(ModelSpec(**base, rpc_workers=tuple(p.endpoint for p in proxies)))
                loaded("tandem", "both", before, proxies, loads)
                for rtt in rtts:
                    for proxy in proxies:
                        proxy.set_rtt(rtt)
                    run_tandem(engine, "2 workers", rtt, proxies)
            finally:
                engine.close()  # frees the workers: each serves one client at a time
            if args.server:
                for mode, extra in server_modes().items():
                    for proxy in proxies:
                        proxy.set_rtt(0.0)  # its load is not timed
                    before = sent(proxies)
                    server = Server(args.server, target_path, threads=args.threads,
                                    rpc=tuple(p.endpoint for p in proxies), **extra)
                    loaded("llama-server", mode, before, proxies, loads)
                    try:
                        for rtt in rtts:
                            for proxy in proxies:
                                proxy.set_rtt(rtt)
                            run_server(server, "2 workers", mode, rtt, proxies)
                    finally:
                        server.close()
        finally:
            for proxy in proxies:
                proxy.close()
    reference = next(r["text"] for r in rows if r["system"] == "tandem" and r["setup"] == "local"
                     and r["mode"] == "plain")
    for row in rows:
        row["same_text_as_local_plain"] = row.pop("text") == reference
    print()
    print(table(rows, bool(args.server)))
    different = [r for r in rows if not r["same_text_as_local_plain"]]
    for r in different:
        print(f"note: {r['system']} {r['setup']} {r['rtt_ms']} {r['mode']}: "
              "a reply other than Tandem's local plain one")
    if args.json:
        args.json.write_text(json.dumps({"max_tokens": args.max_tokens, "draft_max": args.draft_max,
                                         "server_draft_max": server_k if args.server else None,
                                         "threads": args.threads, "worker_threads": args.worker_threads,
                                         "loads": loads, "rows": rows}, indent=1) + "\n")
    return 0


def table(rows: list[dict], with_server: bool) -> str:
    """The markdown table: one line per added RTT (local first), tokens/s and trips/token."""
    def cell(system, setup, rtt, mode, key):
        row = next((r for r in rows if (r["system"], r["setup"], r["rtt_ms"], r["mode"]) == (system, setup, rtt, mode)),
                   None)
        return None if row is None else row[key]

    def number(x, suffix=""):
        return "–" if x is None else f"{x:.2f}{suffix}"

    systems = ["tandem"] + (["llama-server"] if with_server else [])
    names = {"tandem": "Tandem", "llama-server": "llama-server"}
    head = ["added RTT"]
    for s in systems:
        head += [f"{names[s]} plain tok/s", f"{names[s]} spec tok/s", f"{names[s]} speed-up"]
    for s in systems:
        head += [f"{names[s]} trips/token plain", f"{names[s]} trips/token spec"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = [("local", None)] + sorted({(r["setup"], r["rtt_ms"]) for r in rows if r["setup"] != "local"},
                                      key=lambda k: k[1])
    for setup, rtt in keys:
        line = ["local (no workers)" if setup == "local" else f"+{rtt:g} ms"]
        for s in systems:
            plain = cell(s, setup, rtt, "plain", "tokens_per_second")
            spec = cell(s, setup, rtt, "speculative", "tokens_per_second")
            line += [number(plain), number(spec), number(spec / plain if plain and spec else None, "x")]
        for s in systems:
            line += [number(cell(s, setup, rtt, m, "trips_per_token")) for m in ("plain", "speculative")]
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
