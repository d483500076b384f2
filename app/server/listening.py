"""Where the API listens: the loopback test, binding a socket, and the API served on a
thread of its own (for a front end that has its own main loop, like the window).

``tandem serve`` runs uvicorn on the main thread (its Ctrl+C); ``BackgroundServer``
runs the same application on another thread, where uvicorn installs no signal
handlers, and stops it on request.
"""

from __future__ import annotations

import ipaddress
import socket
import threading

from app.errors import TandemError

GRACEFUL_SECONDS = 5
START_SECONDS = 10


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: a free one), or one line saying why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise TandemError(f"Cannot listen on {host}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise TandemError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/v1"


def uvicorn_config(app):
    import uvicorn

    return uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="off",
                          timeout_graceful_shutdown=GRACEFUL_SECONDS)


class BackgroundServer:
    """An ASGI app served on its own thread until ``stop()``."""

    def __init__(self, app, runner) -> None:
        self.app = app
        self.runner = runner  # its jobs are cancelled on stop, so no reply holds the shutdown
        self.url = ""
        self._server = None
        self._thread: threading.Thread | None = None

    def start(self, host: str = "127.0.0.1", port: int = 8080) -> str:
        import uvicorn

        sock = bind(host, port)
        self.url = url_of(sock)
        self._server = uvicorn.Server(uvicorn_config(self.app))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="tandem-api", daemon=True)
        self._thread.start()
        for _ in range(START_SECONDS * 20):
            if self._server.started or not self._thread.is_alive():
                break
            self._thread.join(0.05)
        if not self._server.started:
            self.stop()
            raise TandemError(f"The local server did not start on {host}:{port}.")
        return self.url

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = GRACEFUL_SECONDS + 2) -> None:
        if self._server is None:
            return
        self.runner.cancel_all(abandon=True)
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._server = None
