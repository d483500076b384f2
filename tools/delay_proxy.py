"""A TCP proxy that adds a fixed delay each way and counts round trips: a network between
Tandem and an RPC worker, on one machine. Not part of the product.

    python tools/delay_proxy.py --listen 127.0.0.1:60052 --to 127.0.0.1:50052 --rtt-ms 2

Each chunk read from one side is written to the other ``rtt/2`` later, in order (a
link's propagation delay; no bandwidth limit). A round trip is counted each time data
comes back from the server after data went to it: the client's message, then the
server's reply, is one trip; messages the client sends without waiting (ggml's
asynchronous tensor copies and graph launches) ride on the next one. That counts what a
real network makes the client wait for, whatever the protocol's message boundaries.

``DelayProxy`` is importable (tools/rpc_latency.py reads its counters between a load and
a reply); run as a script it serves until Ctrl+C and prints its counts each second
when they change.
"""

from __future__ import annotations

import argparse
import collections
import socket
import threading
import time

CHUNK = 1 << 20


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.trips = 0
        self.up = 0      # bytes client -> server
        self.down = 0    # bytes server -> client
        self.connections = 0

    def snapshot(self) -> dict:
        with self.lock:
            return {"trips": self.trips, "bytes_up": self.up, "bytes_down": self.down,
                    "connections": self.connections}


class DelayProxy:
    """Listen on ``listen`` (port 0: any free one), forward each connection to ``target``."""

    def __init__(self, target: tuple[str, int], rtt_ms: float, listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.target = target
        self.one_way = rtt_ms / 2000.0  # seconds each way; set_rtt changes it for what is sent next
        self.counts = _Counts()
        self._server = socket.create_server(listen)
        self.address = self._server.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept, daemon=True, name="delay-proxy")

    def set_rtt(self, rtt_ms: float) -> None:
        self.one_way = rtt_ms / 2000.0

    @property
    def endpoint(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def start(self) -> DelayProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.counts.lock:
                self.counts.connections += 1
            _Link(client, server, self, self.counts)


class _Link:
    """One proxied connection: per direction a reader (stamps chunks) and a writer (sends
    each at its stamp plus the proxy's delay, read as it sends: ``one_way`` may change
    between runs on the same connection)."""

    def __init__(self, client: socket.socket, server: socket.socket, proxy: DelayProxy, counts: _Counts) -> None:
        self.counts = counts
        self.last = ""  # which way data last went: "up" or "down"
        for src, dst, way in ((client, server, "up"), (server, client, "down")):
            pending: collections.deque = collections.deque()
            cond = threading.Condition()
            threading.Thread(target=self._read, args=(src, dst, way, pending, cond), daemon=True).start()
            threading.Thread(target=self._write, args=(dst, src, proxy, pending, cond), daemon=True).start()

    def _read(self, src, dst, way, pending, cond) -> None:
        while True:
            try:
                data = src.recv(CHUNK)
            except OSError:
                data = b""
            with self.counts.lock:
                if data:
                    if way == "down" and self.last == "up":
                        self.counts.trips += 1
                    self.last = way
                    if way == "up":
                        self.counts.up += len(data)
                    else:
                        self.counts.down += len(data)
            with cond:
                pending.append((time.perf_counter(), data))
                cond.notify()
            if not data:
                return

    def _write(self, dst, src, proxy, pending, cond) -> None:
        while True:
            with cond:
                cond.wait_for(lambda: pending)
                stamp, data = pending.popleft()
            wait = stamp + proxy.one_way - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if not data:  # the other side hung up: pass it on
                for s in (dst, src):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=_address, default=("127.0.0.1", 0), help="HOST:PORT to listen on")
    parser.add_argument("--to", type=_address, required=True, help="HOST:PORT of the worker")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="round-trip time to add, in ms (default: 0)")
    args = parser.parse_args()
    proxy = DelayProxy(args.to, args.rtt_ms, args.listen).start()
    print(f"delay proxy {proxy.endpoint} -> {args.to[0]}:{args.to[1]}, +{args.rtt_ms:g} ms round trip", flush=True)
    last = None
    try:
        while True:
            time.sleep(1)
            now = proxy.counts.snapshot()
            if now != last:
                print(now, flush=True)
                last = now
    except KeyboardInterrupt:
        proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
