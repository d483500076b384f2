"""Command-line value types: a bad value is one line from argparse (exit 2), never a
traceback later. Shared by ``app.cli.main`` and ``app.bench.speedup``."""

from __future__ import annotations

import argparse
import math
import stat
from pathlib import Path

from app.vocabulary import DRAFT_MAX_RANGE
from app.worker_address import AddressError, parse_split, parse_workers


def whole(low: int | None = None, high: int | None = None, *, what: str = "a whole number"):
    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
        if (low is not None and n < low) or (high is not None and n > high):
            raise argparse.ArgumentTypeError(f"{n} is out of range ({_range(low, high)})")
        return n
    return parse


def real(low: float, high: float | None = None, *, low_open: bool = False):
    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"{value!r} is not a finite number")
        if x < low or (low_open and x == low) or (high is not None and x > high):
            raise argparse.ArgumentTypeError(f"{x:g} is out of range ({_range(low, high, low_open=low_open)})")
        return x
    return parse


def _range(low, high, *, low_open: bool = False) -> str:
    if high is None:
        return f"{'above' if low_open else 'at least'} {low}"
    return f"{low} to {high}" if not low_open else f"above {low}, at most {high}"


def setting_value(name: str, *, what: str = "a whole number"):
    """The type of an option that sets the number setting ``name``: the range declared in
    ``Settings`` (``app.storage.settings.number_range``), the same the window, the
    settings file and the API routes take."""
    from app.storage.settings import number_range

    bounds = number_range(name)
    if bounds.kind is int:
        return whole(bounds.low, bounds.high, what=what)
    return real(bounds.low, bounds.high, low_open=not bounds.low_inclusive)


def draft_max_value(value: str) -> int | str:
    if value == "auto":
        return value
    low, high = DRAFT_MAX_RANGE
    return whole(low, high, what="a whole number or 'auto'")(value)


def gpu_layers_value(value: str) -> int | str:
    """'auto' (as many as fit, planned before loading) or a number of layers (-1: all)."""
    if value == "auto":
        return value
    return setting_value("target_gpu_layers", what="a whole number or 'auto'")(value)


def seed_value(value: str) -> int | None:
    """-1 (or nothing) is a new random seed each run, as in llama.cpp."""
    n = setting_value("seed")(value)
    return None if n == -1 else n


def utf8_text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("is not valid UTF-8 text") from None
    return value


def regular_file(value: str) -> Path:
    """A file to read whole: refused up front if it is a FIFO, a device or a folder."""
    path = Path(value)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{value}: {exc.strerror or 'cannot be read'}") from None
    if not stat.S_ISREG(mode):
        raise argparse.ArgumentTypeError(f"{value} is not a regular file")
    return path


def worker_list(value: str) -> tuple[str, ...]:
    """--rpc host:port,...: llama.cpp RPC workers."""
    try:
        return parse_workers(value)
    except AddressError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def tensor_split(value: str) -> tuple[float, ...]:
    """--tensor-split 3,1: each device's share of the target's offloaded layers."""
    try:
        return parse_split(value)
    except AddressError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
