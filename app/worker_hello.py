"""A llama.cpp RPC worker asked, over a plain socket, what it is: the protocol's hello
(its version), then how many devices it serves and their memory.

ggml aborts the process on any RPC failure, so before ggml first connects to a worker
the backend says the hello itself (``check_worker``) and turns each way it can fail into
one line. The window's Test button (Settings → Hardware) asks the same, with the
devices' memory and the hello's round-trip time (``probe``). Standard library only (and
the engine's error type): the window may import it, and the backend re-exports it.
"""

from __future__ import annotations

import socket
import struct
import time
from contextlib import contextmanager
from dataclasses import dataclass

from app.engine.errors import EngineError

# RPC_PROTO_{MAJOR,MINOR,PATCH}_VERSION of the vendored ggml-rpc.h (llama-cpp-python
# 0.3.36). The client refuses a server whose major differs or whose minor is newer, and
# so does check_worker. tests/backends/llama/test_rpc.py asks a worker of this build for its
# version, so an upgrade that changes it cannot go unnoticed.
PROTOCOL = (7, 0, 0)
HELLO = 14                 # RPC_CMD_HELLO, fixed across versions ("must be always 14")
GET_DEVICE_MEMORY = 11     # RPC_CMD_GET_DEVICE_MEMORY (protocol 7): uint32 device -> uint64 free, total
DEVICE_COUNT = 15          # RPC_CMD_DEVICE_COUNT (protocol 7): -> uint32
CONN_CAPS = 24             # RPC_CONN_CAPS_SIZE: the hello's transport capabilities (zeros: plain TCP)
HELLO_TIMEOUT_S = 10.0     # connect + hello; a worker busy with another client never answers


class WorkerError(EngineError):
    """A worker that cannot be used; the message is one line and names it."""


@dataclass(frozen=True)
class WorkerReport:
    """What a worker said of itself (``probe``)."""

    endpoint: str
    version: tuple[int, int, int]
    memory: tuple[tuple[int, int], ...]  # (free, total) bytes of each device it serves
    hello_seconds: float                 # the hello's round trip, connection made

    def line(self) -> str:
        """One line: '127.0.0.1:50052: RPC 7.0.0, 1 device, 7.6 GiB free of 15.5 GiB; hello 0.3 ms'.
        The protocol names no device (ggml calls each one RPCn): its count and memory it does say."""
        devices = "; ".join(f"{gib(free)} free of {gib(total)}" for free, total in self.memory)
        count = f"{len(self.memory)} device{'' if len(self.memory) == 1 else 's'}"
        return (f"{self.endpoint}: RPC {'.'.join(map(str, self.version))}, {count}, {devices}; "
                f"hello {self.hello_seconds * 1000:.1f} ms")


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


@contextmanager
def _connected(endpoint: str, timeout: float):
    """A connection that has said the hello: (socket, version, the hello's round trip)."""
    host, _, port = endpoint.rpartition(":")
    try:  # IPv4, as ggml's client resolves it (gethostbyname)
        sock = socket.create_connection((socket.gethostbyname(host), int(port)), timeout=timeout)
    except socket.gaierror:
        raise WorkerError(f"worker {endpoint}: no such host") from None
    except ConnectionRefusedError:
        raise WorkerError(f"worker {endpoint} is not there (connection refused); start it with "
                          f"'tandem worker --port {port}' on that machine") from None
    except TimeoutError:
        raise WorkerError(f"worker {endpoint} did not answer within {timeout:.0f} s (a firewall, or no such machine)") from None
    except OSError as exc:
        raise WorkerError(f"worker {endpoint} cannot be reached ({exc.strerror or exc})") from None
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as ggml's client: a round trip, not Nagle's wait
        try:
            started = time.perf_counter()
            sock.sendall(struct.pack("<BQ", HELLO, CONN_CAPS) + bytes(CONN_CAPS))
            size = struct.unpack("<Q", _receive(sock, 8))[0]
            if size != 4 + CONN_CAPS:
                raise WorkerError(f"worker {endpoint} is not a llama.cpp RPC worker of a version Tandem knows "
                                  f"(a hello of {size} bytes)")
            major, minor, patch = _receive(sock, size)[:3]
            rtt = time.perf_counter() - started
        except TimeoutError:
            raise WorkerError(f"worker {endpoint} accepted but did not answer within {timeout:.0f} s; a worker "
                              "serves one client at a time: is another program using it?") from None
        except (ConnectionError, EOFError):
            raise WorkerError(f"worker {endpoint} closed the connection at the hello: it is not a llama.cpp "
                              "RPC worker, or one of another protocol version") from None
        except OSError as exc:
            raise WorkerError(f"worker {endpoint}: {exc.strerror or exc} during the hello") from None
        yield sock, (major, minor, patch), rtt


def hello(endpoint: str, timeout: float = HELLO_TIMEOUT_S) -> tuple[int, int, int]:
    """Connect and say the protocol's hello: the worker's (major, minor, patch). Raises
    WorkerError in one line. The worker serves one client at a time, so this must not run
    against a worker ggml is already connected to (``rpc.connect`` skips those)."""
    with _connected(endpoint, timeout) as (_sock, version, _rtt):
        return version


def _receive(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _version_rule(endpoint: str, version: tuple[int, int, int]) -> None:
    if version[0] != PROTOCOL[0] or version[1] > PROTOCOL[1]:
        raise WorkerError(f"worker {endpoint} speaks RPC protocol {'.'.join(map(str, version))}, this Tandem's "
                          f"llama.cpp speaks {'.'.join(map(str, PROTOCOL))}; run the same llama.cpp version on both")


def check_worker(endpoint: str, timeout: float = HELLO_TIMEOUT_S) -> tuple[int, int, int]:
    """The hello, and the version rule ggml's client applies (it aborts where this raises)."""
    return timed_check(endpoint, timeout)[0]


def timed_check(endpoint: str, timeout: float = HELLO_TIMEOUT_S) -> tuple[tuple[int, int, int], float]:
    """``check_worker``'s version, and the hello's round trip in seconds: what each of the
    target's passes pays per worker (one request answered per worker, as
    ``tools/delay_proxy.py`` counts them)."""
    with _connected(endpoint, timeout) as (_sock, version, rtt):
        pass
    _version_rule(endpoint, version)
    return version, rtt


def probe(endpoint: str, timeout: float = HELLO_TIMEOUT_S) -> WorkerReport:
    """The hello, the version rule, then each device's memory: what Settings' Test shows.
    Raises WorkerError in one line (only a worker of this protocol is asked more than the hello)."""
    with _connected(endpoint, timeout) as (sock, version, rtt):
        _version_rule(endpoint, version)
        try:
            count = struct.unpack("<I", _command(sock, DEVICE_COUNT, b"", 4))[0]
            memory = tuple(struct.unpack("<QQ", _command(sock, GET_DEVICE_MEMORY, struct.pack("<I", i), 16))
                           for i in range(count))
        except TimeoutError:
            raise WorkerError(f"worker {endpoint} said hello, then did not answer within {timeout:.0f} s") from None
        except (ConnectionError, EOFError, ValueError):
            raise WorkerError(f"worker {endpoint} said hello, then would not say its devices' memory") from None
        except OSError as exc:
            raise WorkerError(f"worker {endpoint}: {exc.strerror or exc} after the hello") from None
    return WorkerReport(endpoint, version, memory, rtt)


def _command(sock: socket.socket, command: int, request: bytes, answer_size: int) -> bytes:
    """One RPC command: | cmd (1) | size (8) | request | -> | size (8) | answer |."""
    sock.sendall(struct.pack("<BQ", command, len(request)) + request)
    size = struct.unpack("<Q", _receive(sock, 8))[0]
    if size != answer_size:
        raise ValueError(size)
    return _receive(sock, size)
