"""The messages between a front end and the engine process, written once for both sides.

Plain frozen dataclasses, pickled over a local channel (``multiprocessing.connection``:
a Unix socket, a Windows named pipe). No Qt and no llama.cpp here: the window imports
this module, the engine process (``app.enginehost``) imports it, and neither imports
the other. What they carry (``ModelSpec``, ``TokenEvent``, ``Stats``, ``LoadInfo``,
the sampling and speculation configs) is plain data already.

To the engine: ``Load``, ``Generate``, ``Stop``, ``Check``, ``Ping``, ``Serve``,
``StopServing``, ``Shutdown``. From it: ``Ready`` once, then ``LoadProgress``,
``Loaded`` / ``LoadFailed``, ``Tokens`` (one message per batch of a reply's tokens, never
one per token), ``Finished`` / ``Failed``, ``Checked``, ``Pong``, ``Serving``, ``Served``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from app.engine.types import SamplingConfig, SpecConfig, Stats, TokenEvent
from app.session.chat_types import LoadInfo
from app.session.config import ModelSpec

log = logging.getLogger(__name__)

ENGINE_FLAG = "--engine"  # ``python -m app --engine ADDRESS``: handled first thing by app.__main__

# Names of the switches the engine reads from its environment, for tests only: they are
# honoured only when TEST_HOOKS is "1" (never set by the app itself).
TEST_HOOKS = "TANDEM_TEST_HOOKS"
TEST_ABORT_AFTER = "TANDEM_TEST_ABORT_AFTER"    # os.abort() after this many tokens of a reply
TEST_HANG_AFTER = "TANDEM_TEST_HANG_AFTER"      # block forever after this many tokens (a hung decode)
TEST_HANG_LOADING = "TANDEM_TEST_HANG_LOADING"  # block forever at a load's first progress report
TEST_ONCE = "TANDEM_TEST_ONCE"                  # a file: a fault fires only if it is absent (and makes it)
TEST_LOADER = "TANDEM_TEST_LOADER"              # "path/to/file.py:function": load with that instead


# --- to the engine ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Load:
    """(Re)load models; a newer ``Load`` abandons an older one still running."""

    load_id: int
    spec: ModelSpec


@dataclass(frozen=True)
class Generate:
    """One reply to produce, after whatever the engine is doing now."""

    request_id: int
    history: tuple[tuple[str, str], ...]  # (role, text), ending with the user's turn
    system_prompt: str = ""
    sampling: SamplingConfig = SamplingConfig()
    spec: SpecConfig = SpecConfig()
    max_tokens: int = 256
    replaced: tuple[str, ...] = ()  # the replies this one replaces (Regenerate), to copy from
    chat: int | None = None  # the chat's id in the history: its cache is kept on disk while others run


@dataclass(frozen=True)
class Stop:
    """Stop one reply (or every one, ``None``): it ends within one speculative round."""

    request_id: int | None = None


@dataclass(frozen=True)
class Check:
    """Help → Check speculation: the self-test on the loaded pair."""


@dataclass(frozen=True)
class Ping:
    seq: int


@dataclass(frozen=True)
class Serve:
    """Start the local server on ``host:port`` with the loaded models (one load, one queue)."""

    host: str
    port: int
    sampling: SamplingConfig
    spec: SpecConfig
    max_tokens_limit: int


@dataclass(frozen=True)
class StopServing:
    pass


@dataclass(frozen=True)
class Shutdown:
    """Free the models and end the process."""


# --- from the engine -------------------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    pid: int
    chat_formats: tuple[str, ...] = ()  # llama.cpp's built-in chat formats, by name (the window offers them)


@dataclass(frozen=True)
class LoadProgress:
    load_id: int
    stage: str
    fraction: float  # in [0, 1], or -1 when unknown


@dataclass(frozen=True)
class Loaded:
    load_id: int
    info: LoadInfo


@dataclass(frozen=True)
class LoadFailed:
    load_id: int
    message: str  # one line for the user


@dataclass(frozen=True)
class Tokens:
    """A batch of a reply's token events, in order; ``stats`` a live snapshot when one was taken."""

    request_id: int
    events: list[TokenEvent] = field(default_factory=list)
    stats: Stats | None = None


@dataclass(frozen=True)
class Finished:
    request_id: int
    stats: Stats


@dataclass(frozen=True)
class Failed:
    request_id: int
    message: str


@dataclass(frozen=True)
class Checked:
    result: object  # a SelfTestReport, or a one-line message


@dataclass(frozen=True)
class Pong:
    """The answer to a ``Ping``: how long the engine has been at one step without progress
    (0 when idle or progressing), so a hung decode is told from a long reply."""

    seq: int
    stuck_seconds: float


@dataclass(frozen=True)
class Serving:
    """The local server's state after a ``Serve`` or ``StopServing``: its address, or why not."""

    url: str = ""
    error: str = ""


@dataclass(frozen=True)
class Served:
    record: dict  # one line of the request log (app.server.worker.request_record)


@dataclass(frozen=True)
class Died:
    """Never sent: what a front end's link puts among the engine's messages when the
    channel closed without being asked to, so that its reader sees the death in order."""

    line: str  # how it ended, in one line (app.session.engine_death)


def receive(conn, handle: Callable[[object], None]) -> None:
    """Hand each message arriving on ``conn`` to ``handle`` until the channel closes: the
    one receive loop of both ends. A message that does not unpickle is skipped, and a
    handler's fault is logged, so neither ends the conversation."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        except Exception:  # noqa: BLE001 — a message that does not unpickle is skipped
            log.exception("An unreadable message on the engine's channel")
            continue
        try:
            handle(message)
        except Exception:  # noqa: BLE001
            log.exception("Handling %s failed", type(message).__name__)


def merge_tokens(messages: list) -> list:
    """Consecutive ``Tokens`` of one request as one message (the newest stats win): what
    piled up while the channel was busy goes as one batch."""
    merged: list = []
    for message in messages:
        last = merged[-1] if merged else None
        if isinstance(message, Tokens) and isinstance(last, Tokens) and last.request_id == message.request_id:
            last.events.extend(message.events)
            if message.stats is not None:
                merged[-1] = Tokens(last.request_id, last.events, message.stats)
        else:
            merged.append(message if not isinstance(message, Tokens)
                          else Tokens(message.request_id, list(message.events), message.stats))
    return merged
