"""Short requests served while a long prompt is read.

One engine serves requests in turn, and reading a prompt that fills the context (a chat
of 50,000 messages, trimmed to it) takes the target a while. The engine evaluates such
a prompt in pieces (``SpeculativeEngine.generate``'s ``pause``); between two pieces,
``Interleave`` serves the requests waiting then, each whole, with the long prompt's
cache copied out and put back afterwards (a ``CacheImage``: ``cache_image`` /
``load_cache_image``), so no work is lost. Requests served that way do not pause in
turn: they wait at most one piece (``PAUSE_EVERY`` tokens) of the long prompt.
"""

from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger(__name__)


class Interleave:
    """A ``pause`` for one session: ``take()`` hands over the next waiting job (None:
    none waits), ``serve(job)`` runs it."""

    def __init__(self, session, take: Callable[[], object], serve: Callable[[object], None]) -> None:
        self.session, self.take, self.serve = session, take, serve
        self.inside = False

    def pause(self) -> None:
        if self.inside:
            return
        job = self.take()
        if job is None:
            return
        target = self.session.target
        if not target.keeps_states:
            self.serve(job)  # no way to keep the long prompt's cache: serve it all the same
            return
        saved = target.cache_image()
        self.inside = True
        try:
            while job is not None:
                self.serve(job)
                job = self.take()
        finally:
            self.inside = False
            target.load_cache_image(saved)
