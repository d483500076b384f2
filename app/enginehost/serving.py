"""The window's Local server, inside the engine process: ``tandem serve``'s API on a thread
of its own, its requests run on the engine thread with the models the window loaded (one
load), in turn with the chat's replies (one queue). Each request served is told to the
window (``Served``) for its dialog.
"""

from __future__ import annotations

import logging
import threading

from app.errors import TandemError, one_line
from app.server.worker import HandedJobs
from app.session import protocol as p

log = logging.getLogger(__name__)


class EngineServer:
    def __init__(self, host) -> None:
        self._host = host
        self._lock = threading.Lock()  # one start or stop at a time
        self._server = None
        # A served request may replace the chat's conversation in the cache: it goes to disk first.
        self.jobs = HandedJobs(lambda serve: host.submit(lambda: (host.lend_cache(), serve(host.session))))
        self.jobs.listeners.append(lambda record: host.out.put(p.Served(record)))

    def start(self, message: p.Serve) -> None:
        from app.server.api import create_app
        from app.server.listening import BackgroundServer
        from app.server.requests import Defaults

        with self._lock:
            self._stop()
            session = self._host.session
            if session is None:
                self._host.out.put(p.Serving(error="Load a model first: the server uses the window's models."))
                return
            defaults = Defaults(sampling=message.sampling, spec=message.spec,
                                max_tokens_limit=message.max_tokens_limit)
            info = session.info
            server = BackgroundServer(create_app(self.jobs, model_id=info.target_name, defaults=defaults, info=info),
                                      self.jobs)
            try:
                url = server.start(message.host, message.port)
            except TandemError as exc:
                self._host.out.put(p.Serving(error=str(exc)))
                return
            except Exception as exc:  # noqa: BLE001
                log.exception("The local server did not start")
                self._host.out.put(p.Serving(error=one_line(exc)))
                return
            self._server = server
            self._host.out.put(p.Serving(url=url))

    def stop(self, report: bool = False) -> None:
        with self._lock:
            self._stop()
        if report:
            self._host.out.put(p.Serving())

    def cancel_all(self) -> None:
        self.jobs.cancel_all(abandon=True)

    def _stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.stop()
