"""The spelling of llama.cpp RPC workers and of a split over them, checked in one place.

``--rpc host:port,...`` and ``--tensor-split 3,1`` (llama.cpp's names) on the command
line, and the same text in the settings, are read here: a bad value is one line,
before anything connects or loads. Standard library only: the settings, the command
line and the backend all read it.
"""

from __future__ import annotations

import math

DEFAULT_PORT = 50052   # llama.cpp's rpc-server default, and ``tandem worker``'s
MAX_WORKERS = 16       # GGML_RPC_MAX_SERVERS
MAX_SPLIT = 16         # llama_max_devices(): tensor_split's length


class AddressError(ValueError):
    """A worker list or a split that cannot be used; the message is one line."""


def parse_endpoint(text: str) -> str:
    """``host:port`` as ggml-rpc reads it (the first ':' ends the host, so no IPv6)."""
    host, sep, port = text.strip().partition(":")
    if not sep or not host or not port:
        raise AddressError(f"worker {text.strip()!r} must be written host:port (e.g. 192.168.1.20:{DEFAULT_PORT})")
    if ":" in port or host.startswith("["):
        raise AddressError(f"worker {text.strip()!r}: llama.cpp's RPC takes a host name or IPv4 address, not IPv6")
    if any(c.isspace() for c in host):
        raise AddressError(f"worker {text.strip()!r}: the host has a space in it")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise AddressError(f"worker {text.strip()!r}: the port must be a number from 1 to 65535")
    return f"{host}:{int(port)}"


def parse_workers(text: str) -> tuple[str, ...]:
    """``host:port,host:port`` -> the endpoints, in order; '' -> none."""
    parts = [p for p in (text or "").split(",") if p.strip()]
    endpoints = tuple(parse_endpoint(p) for p in parts)
    if len(set(endpoints)) != len(endpoints):
        raise AddressError("the same worker is listed twice")
    if len(endpoints) > MAX_WORKERS:
        raise AddressError(f"at most {MAX_WORKERS} workers (llama.cpp's limit), not {len(endpoints)}")
    return endpoints


def parse_split(text: str) -> tuple[float, ...]:
    """``3,1`` -> each device's share of the offloaded layers, in device order; '' -> by free memory."""
    parts = [p.strip() for p in (text or "").replace("/", ",").split(",")]
    if parts == [""]:
        return ()
    try:
        shares = tuple(float(p) for p in parts)
    except ValueError:
        raise AddressError(f"the tensor split {text!r} must be numbers separated by commas (e.g. 3,1)") from None
    if any(not math.isfinite(s) or s < 0 for s in shares):
        raise AddressError(f"the tensor split {text!r} must be numbers of 0 or more")
    if not any(shares):
        raise AddressError(f"the tensor split {text!r} gives every device nothing")
    if len(shares) > MAX_SPLIT:
        raise AddressError(f"the tensor split has {len(shares)} shares; llama.cpp takes at most {MAX_SPLIT}")
    return shares


# ``tandem worker``'s hidden flag for a worker started by the window (File → Local worker…):
# it ends when its stdin closes, so a window that dies leaves no worker behind.
UNTIL_STDIN_CLOSES = "--until-stdin-closes"
