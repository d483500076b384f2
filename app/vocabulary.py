"""The words the layers share: token kinds, stop reasons, drafter kinds, message states.

A leaf (it imports nothing of the app), so the engine, the history and the window
read one table each: the history stores these values, the window shows them, the
engine emits them. Each is a ``StrEnum``: it compares equal to, and is stored and
formatted as, its value.
"""

from __future__ import annotations

import enum

# Fixed draft lengths a user may choose, in the settings and on the command line alike.
DRAFT_MAX_RANGE = (1, 64)


class TokenKind(enum.StrEnum):
    """What happened to an emitted token (docs/ARCHITECTURE.md, "Token kinds")."""

    ACCEPTED = "accepted"    # a draft guess the target agreed with
    CORRECTED = "corrected"  # the target's token replacing a rejected guess
    BONUS = "bonus"          # the target's extra token after a fully accepted draft
    PLAIN = "plain"          # produced without speculation


class StopReason(enum.StrEnum):
    """Why a generation ended (stored with a reply's stats as its value)."""

    EOS = "eos"                    # the model ended its turn
    MAX_TOKENS = "max_tokens"      # the reply reached its length limit
    CANCELLED = "cancelled"        # stopped by the user (or the app closing)
    CONTEXT_FULL = "context_full"  # no room left in the context


class DrafterKind(enum.StrEnum):
    """Where guesses come from (a setting, a command-line choice, what was loaded).

    Each kind but NONE is declared, with its words, needs and factory, in
    ``app/drafter_kinds.py``."""

    MODEL = "model"    # a small draft model
    LOOKUP = "lookup"  # prompt lookup: copies from the context, no model
    LOOKAHEAD = "lookahead"  # lookahead decoding: the target's own n-gram pool, and copies, no model
    MTP = "mtp"        # the target's own MTP (nextn) head, shipped in its file
    EAGLE3 = "eagle3"  # an EAGLE-3 drafter file, trained on the target, reading its layers
    NONE = "none"      # no speculation


class MessageState(enum.StrEnum):
    """Where a chat message stands, in the window and in the history."""

    COMPLETE = "complete"
    STREAMING = "streaming"      # a reply still being written
    INTERRUPTED = "interrupted"  # the app ended while the reply streamed
    STOPPED = "stopped"          # the user stopped the reply
    FAILED = "failed"            # nothing came of it (shown, never stored)
