"""tools/rpc_latency.py (not a product part, but its figures go in the README's table): the
table's arithmetic, and its llama-server side on two real workers behind the proxies.
That side needs a llama-server built from the same llama.cpp with RPC on, named by
TANDEM_LLAMA_SERVER; without it those tests skip."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from delay_proxy import DelayProxy  # noqa: E402
from rpc_latency import PROMPT, Server, sent, table, tandem_ggml  # noqa: E402
from rpc_workers import workers  # noqa: E402

SERVER = os.environ.get("TANDEM_LLAMA_SERVER", "")
needs_server = pytest.mark.skipif(not SERVER,
                                  reason="no llama-server: set TANDEM_LLAMA_SERVER to one built with RPC on")


def _row(system, setup, rtt, mode, tps, trips):
    return {"system": system, "setup": setup, "rtt_ms": rtt, "mode": mode, "tokens_per_second": tps,
            "trips_per_token": trips}


def test_the_table_has_a_line_per_rtt_with_each_systems_speed_up_and_trips():
    rows = [_row("tandem", "local", None, "plain", 20.0, None),
            _row("tandem", "local", None, "speculative", 30.0, None),
            _row("tandem", "2 workers", 2.0, "plain", 10.0, 2.0),
            _row("tandem", "2 workers", 2.0, "speculative", 25.0, 0.4),
            _row("llama-server", "2 workers", 2.0, "plain", 8.0, 2.0),
            _row("llama-server", "2 workers", 2.0, "speculative", 12.0, 0.5),
            _row("tandem", "2 workers", 0.5, "plain", 16.0, 2.0),
            _row("tandem", "2 workers", 0.5, "speculative", 24.0, 0.4)]
    lines = table(rows, with_server=True).splitlines()
    assert lines[0].startswith("| added RTT | Tandem plain tok/s | Tandem spec tok/s | Tandem speed-up | llama-server")
    assert lines[2] == "| local (no workers) | 20.00 | 30.00 | 1.50x | – | – | – | – | – | – | – |"
    # RTTs in order, whatever the rows' order:
    assert lines[3] == "| +0.5 ms | 16.00 | 24.00 | 1.50x | – | – | – | 2.00 | 0.40 | – | – |"
    assert lines[4] == "| +2 ms | 10.00 | 25.00 | 2.50x | 8.00 | 12.00 | 1.50x | 2.00 | 0.40 | 2.00 | 0.50 |"
    assert len(lines) == 5


@needs_server
def test_llama_server_puts_its_target_on_both_workers_keeps_its_draft_here_and_speculates_losslessly(demo_models):
    ggml = tandem_ggml()
    with workers(2) as started:
        proxies = [DelayProxy(("127.0.0.1", w.port), 0.5).start() for w in started]
        endpoints = tuple(p.endpoint for p in proxies)
        try:
            replies, loads, trips = {}, {}, {}
            for mode, draft in (("plain", ""), ("speculative", str(demo_models.draft))):
                before = sent(proxies)
                server = Server(SERVER, str(demo_models.target), threads=1, rpc=endpoints, draft=draft, ggml=ggml)
                try:
                    loads[mode] = [after - b for after, b in zip(sent(proxies), before)]
                    trips_before = sum(p.counts.snapshot()["trips"] for p in proxies)
                    replies[mode] = server.reply(server.prompt(PROMPT), 12)
                    trips[mode] = sum(p.counts.snapshot()["trips"] for p in proxies) - trips_before
                finally:
                    server.close()
        finally:
            for proxy in proxies:
                proxy.close()
    # Each worker got a share of the target's weights (the demo target is 515 MiB in F32)...
    assert all(sent_bytes > 50 * 2**20 for sent_bytes in loads["plain"])
    # ...and the draft (92 MiB) went to neither: the speculative server sent them what the plain one did.
    assert all(abs(s - p) < 8 * 2**20 for s, p in zip(loads["speculative"], loads["plain"]))
    assert trips["plain"] > 0 and trips["speculative"] > 0
    assert replies["plain"]["predicted_n"] == replies["speculative"]["predicted_n"] == 12
    assert replies["speculative"]["draft_n"] > 0
    assert replies["speculative"]["text"] == replies["plain"]["text"]
