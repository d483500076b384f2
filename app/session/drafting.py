"""A draft made from the user's target, for the front ends (the window's library and
first-run screen, ``tandem make-draft``): planned by ``engine.speculation.self_draft``, written by
llama.cpp's quantizer in a child process (``backends.draft_maker``) and checked like
any other model file. The window's side reaches the backends only through here and
``app.session.pair_check`` (each named in pyproject.toml's contracts)."""

from __future__ import annotations

from app.backends.draft_maker import DraftCancelled, make_draft, space_line
from app.engine.speculation.self_draft import plan_draft
from app.storage.made_drafts import find_made

__all__ = ["DraftCancelled", "find_made", "make_draft", "plan_draft", "space_line"]
