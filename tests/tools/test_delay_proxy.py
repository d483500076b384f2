"""tools/delay_proxy.py (not a product part, but its counts go in the README's table): data
passes intact both ways, and a round trip is a message to the server then its reply,
however many messages went ahead without waiting."""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from delay_proxy import DelayProxy  # noqa: E402


def echo_server() -> socket.socket:
    """Answers each line ending in '?' with its text upper-cased; other lines get no answer."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = server.accept()
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                if line.endswith(b"?\n"):
                    conn.sendall(line.upper())

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_round_trips_are_counted_and_data_passes_intact():
    server = echo_server()
    proxy = DelayProxy(server.getsockname()[:2], rtt_ms=1.0).start()
    try:
        with socket.create_connection(proxy.address) as client, client.makefile("rb") as replies:
            for word in (b"one", b"two", b"three"):
                client.sendall(word + b"?\n")
                assert replies.readline() == word.upper() + b"?\n"
            # Two messages that wait for nothing, then one that does: one trip.
            client.sendall(b"async a\n")
            client.sendall(b"async b\n")
            client.sendall(b"last?\n")
            assert replies.readline() == b"LAST?\n"
        counts = proxy.counts.snapshot()
        assert counts["trips"] == 4 and counts["connections"] == 1
        assert counts["bytes_down"] == len(b"ONE?\nTWO?\nTHREE?\nLAST?\n")
        assert counts["bytes_up"] == len(b"one?\ntwo?\nthree?\nasync a\nasync b\nlast?\n")
    finally:
        proxy.close()
        server.close()
