"""Start the chat window (falls back to the terminal chat when Qt cannot start)."""

from __future__ import annotations

import argparse


def launch(args: argparse.Namespace) -> int:
    from app.cli import cmd_chat

    for name, value in (("temperature", 0.8), ("top_k", 40), ("top_p", 0.95), ("min_p", 0.05),
                        ("seed", None), ("max_tokens", 512), ("ignore_eos", False),
                        ("no_speculation", False), ("draft_max", "auto"), ("draft_min", 1),
                        ("p_min", 0.0), ("system", "")):
        setattr(args, name, getattr(args, name, value))
    return cmd_chat(args)
