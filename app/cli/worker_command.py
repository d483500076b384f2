"""``tandem worker``: this machine's GPU (or CPU) served to other machines' Tandem (or
llama.cpp) as an RPC device, from the same llama.cpp build Tandem runs on.

The RPC protocol has no authentication: whoever reaches the port can run work on the
device and read what is sent to it. So the worker binds 127.0.0.1 unless told
otherwise, and an address other machines can reach needs ``--allow-remote`` and is
said out loud in the terminal.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import threading

from app.terminal.arg_types import whole
from app.terminal.shared import UsageError
from app.worker_address import DEFAULT_PORT, UNTIL_STDIN_CLOSES
from app.worker_hello import gib

REMOTE_WARNING = ("tandem: warning: the worker listens on {host}: anyone who can reach port {port} can use this "
                  "machine's {device} and read what is sent to it (llama.cpp's RPC has no password). "
                  "Use it only on a network you trust.")


def add_parser(commands) -> None:
    worker = commands.add_parser(
        "worker", help="serve this machine's GPU or CPU to another machine's Tandem (llama.cpp RPC)",
        description="Serve this machine's GPU (else its CPU) as a llama.cpp RPC worker. On the machine "
                    "with the models: tandem chat --rpc THIS_MACHINE:PORT. Ctrl+C stops it.")
    worker.add_argument("--host", "-H", default="127.0.0.1",
                        help="IPv4 address to listen on; 0.0.0.0: all (default: 127.0.0.1, this machine only)")
    worker.add_argument("--port", "-p", type=whole(1, 65535), default=DEFAULT_PORT,
                        help="port to listen on (default: %(default)s)")
    worker.add_argument("--threads", "-t", type=whole(1, 1024), default=None, metavar="N",
                        help="CPU threads for a CPU device (default: as Tandem chooses, at most 8)")
    worker.add_argument("--device", "-d", default=None, metavar="NAME",
                        help="the llama.cpp device to serve, e.g. CPU or CUDA0 (default: the GPUs, else the CPU)")
    worker.add_argument("--cache", "-c", action="store_true",
                        help="keep large tensors in a local cache, so a model sent again loads faster")
    worker.add_argument("--allow-remote", action="store_true",
                        help="allow an address other machines can reach (anyone who reaches the port can use it)")
    # The window's File → Local worker… starts the worker with this: it ends when the
    # window's end of its stdin closes, so a window that crashed leaves no worker behind.
    worker.add_argument(UNTIL_STDIN_CLOSES, action="store_true", help=argparse.SUPPRESS)


def is_loopback(host: str) -> bool:
    return ipaddress.IPv4Address(host).is_loopback


def cmd_worker(args: argparse.Namespace) -> int:
    from app.backends.llama import rpc
    from app.backends.llama.process_setup import default_threads

    host, port = args.host.strip(), args.port
    host = "127.0.0.1" if host == "localhost" else host
    try:  # ggml's server binds an IPv4 address given as numbers (inet_addr), no names
        ipaddress.IPv4Address(host)
    except ValueError:
        raise UsageError(f"--host {args.host!r} must be an IPv4 address of this machine, e.g. 192.168.1.20 "
                         "(or 0.0.0.0 for all of them)") from None
    remote = not is_loopback(host)
    if remote and not args.allow_remote:
        raise UsageError(f"--host {host} lets other machines use this one, and llama.cpp's RPC has no password; "
                         "add --allow-remote if this network is trusted")
    if not rpc.available():
        raise UsageError("this llama.cpp build has no RPC backend; rebuild it with installers/setup.py")
    devices = _chosen_devices(rpc, args.device)
    _check_port_free(host, port)
    threads = args.threads or default_threads()
    device_line = ", ".join(f"{d.name} ({d.description})" for d in devices)
    print(f"Tandem worker (llama.cpp RPC {'.'.join(map(str, rpc.PROTOCOL))}) on {host}:{port}", flush=True)
    for d in devices:
        print(f"  device: {d.name} - {d.description} ({d.kind_name}), {gib(d.free)} free of {gib(d.total)}"
              + (f", {threads} threads" if d.kind == rpc.DEV_CPU else ""), flush=True)
    if remote:
        print(REMOTE_WARNING.format(host=host, port=port, device=device_line), file=sys.stderr, flush=True)
    use = f"THIS_MACHINE:{port}" if host == "0.0.0.0" else f"{host}:{port}"
    print(f"  use it: tandem chat --rpc {use}    (Ctrl+C stops the worker)", flush=True)
    cache = None
    if args.cache:
        from app.storage import paths

        cache = str(paths.cache_dir() / "rpc")
    # ggml's loop never returns while it serves, and a thread in C code cannot take Ctrl+C:
    # the loop runs in its own thread, the main thread waits and takes the signal.
    server = threading.Thread(target=rpc.serve, args=(f"{host}:{port}", devices, threads, cache),
                              name="tandem-rpc-worker", daemon=True)
    server.start()
    if args.until_stdin_closes:
        threading.Thread(target=_exit_when_stdin_closes, name="tandem-worker-parent", daemon=True).start()
    while server.is_alive():
        server.join(0.5)
    raise UsageError(f"llama.cpp's RPC server stopped (it could not listen on {host}:{port}?)")


def _exit_when_stdin_closes() -> None:
    if sys.stdin is None:  # no stdin to watch (a frozen GUI start): nothing to wait for
        return
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    os._exit(0)  # ggml's loop cannot be asked to stop: the process goes


def _chosen_devices(rpc, name: str | None):
    if name is None:
        return rpc.worker_devices()
    devices = rpc.local_devices()
    chosen = [d for d in devices if d.name.lower() == name.lower()]
    if not chosen:
        raise UsageError(f"--device {name!r} is not a llama.cpp device here; this machine has: "
                         + ", ".join(f"{d.name} ({d.description})" for d in devices))
    return chosen


def _check_port_free(host: str, port: int) -> None:
    """A port already taken is one line here; ggml would only print it and return."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ggml's own socket does
            probe.bind((host, port))
    except socket.gaierror:
        raise UsageError(f"--host {host}: no such address on this machine") from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); is another worker there? "
                         "Choose another --port") from None
