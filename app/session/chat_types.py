"""What a ``ChatSession`` (``app.session.chat``) tells the rest: what got loaded
(``LoadInfo``) and a conversation as tokens (``ChatPrompt``). Plain values, apart from the
session: the window's side, the protocol and the server import them here, and so never
the session's own module (which reaches the speculative loop and llama.cpp's grammars)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from app.engine.types import DrafterKind


@dataclass(frozen=True)
class LoadInfo:
    """What got loaded, for a front end to show."""

    target_name: str
    target_path: str
    draft_name: str = ""       # '' when no draft model is in use
    draft_path: str = ""
    drafter: DrafterKind = DrafterKind.NONE
    speculation_available: bool = False
    note: str = ""             # why there is no speculation, when there is none
    failed_rule: str | None = None  # the compatibility rule a rejected draft failed
    compute: str = "CPU"       # llama.cpp's compute backend
    workers: tuple[str, ...] = ()  # the RPC workers (host:port) the target's layers are split over
    # With workers: (where, how many of the target's layers), each worker then "here", as
    # llama.cpp placed them; () without workers.
    layers: tuple[tuple[str, int], ...] = ()
    # With workers: the hello's round trip to each (seconds), measured before the load; a
    # target pass makes one per worker, so their sum is the network's share of a round.
    worker_rtt: tuple[float, ...] = ()
    n_ctx: int = 0             # the target's context, in tokens (0: unknown)
    n_ctx_train: int = 0       # the context the target was trained on (0: unknown)
    chat_format: str = ""      # the built-in chat format in use; '' for the file's own template
    chat_format_notice: str = ""  # said once: no usable template in the file, which format stands in
    # The memory plan the load followed (app/session/fit.py): one line, what it put on the
    # GPU and in all, and what llama.cpp then allocated (its buffers, both models).
    memory_plan: str = ""
    planned_gpu_bytes: int = 0
    planned_bytes: int = 0
    allocated_bytes: int = 0
    gpu_layers: tuple[int, int] = (0, 0)  # target's and draft's layers given to llama.cpp (-1: all)


class ChatPrompt(NamedTuple):
    tokens: list[int]
    left_out: int = 0  # earliest messages left out so the conversation fits the context
    notice: str = ""   # one line when the model's chat template failed and ChatML stood in
    tools: object = None  # engine.prompting.tool_prompt.ToolPlan: how the reply is read for tool calls
