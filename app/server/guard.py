"""What every route goes through first: who may ask (Host, Origin), the API key and the
body cap.

A plain ASGI wrapper, so it covers every route, known or not, before FastAPI reads
a byte: a request from a web page the user merely visited is refused unread, as is
one without the key, and a body is read at most up to the cap (its
``Content-Length`` is believed only when it is too big) and then handed on whole.

Why each check (a request may come from a web page the user merely visits):

- **Host.** After DNS rebinding, an attacker's domain resolves to 127.0.0.1 and the
  browser sends ``Host: evil.example:PORT`` to this server, then lets the page read
  the reply. Only loopback names, the address the request arrived at, and the names
  given with ``--allowed-host`` are served.
- **Origin.** A page on another site can send a "simple" POST (``text/plain``,
  no preflight, so CORS never applies); browsers mark it with its ``Origin``. Only
  the server's own origin and those given with ``--cors-origin`` are served.
- **Content-Type is not checked.** Every POST route takes JSON, whatever the header
  says, as Ollama does: ``curl -d`` (Ollama's own examples) labels its body
  ``application/x-www-form-urlencoded`` and some clients send no Content-Type at all.
  A web page cannot use that: browsers mark every POST with its ``Origin`` (a foreign
  one, or ``null``, is refused above), and a request that says it comes from another
  site (``Sec-Fetch-Site: cross-site`` / ``same-site``) without one is refused too.
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from app.server.errors import ApiError

DEFAULT_MAX_BODY = 4 * 1024 * 1024
ANY_HOST = "*"  # --allowed-host '*': every Host (a reverse proxy in front that checks it)


class Guard:
    def __init__(self, app, *, api_key: str | None = None, max_body: int = DEFAULT_MAX_BODY,
                 allowed_hosts=(), cors_origins=()) -> None:
        self.app = app
        self.api_key = api_key.encode("utf-8") if api_key else None
        self.max_body = max_body
        self.allowed_hosts = frozenset(_host_name(h) for h in allowed_hosts)
        self.cors_origins = frozenset(o.rstrip("/").lower() for o in cors_origins)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            await send_error(send, refusal)
            return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await send_error(send, self._too_big())
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away while sending
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                await send_error(send, self._too_big())
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def refusal(self, scope, headers: dict[bytes, bytes]) -> ApiError | None:
        """Why this request is not served, or None; the checks in the order a browser's
        request would fail them, before the key (a page must not learn whether one is set)."""
        host = headers.get(b"host")
        if host is not None and not self._host_allowed(_text(host), scope.get("server")):
            return ApiError(403, f"Host {_shown(_text(host))} is not served here: only loopback names and the "
                            "server's own address are (DNS rebinding protection); start it with "
                            "--allowed-host NAME to serve that name.", code="forbidden_host")
        origin = headers.get(b"origin")
        if origin is not None and not self._origin_allowed(_text(origin), _text(host or b"")):
            return ApiError(403, f"Requests from the web page at {_shown(_text(origin))} are not served: "
                            "start the server with --cors-origin ORIGIN to let that page in.",
                            code="forbidden_origin")
        site = _text(headers.get(b"sec-fetch-site", b"")).strip().lower()
        if origin is None and site in ("cross-site", "same-site"):
            # A browser that left Origin out (a GET-like fetch, an old engine) still says where it came from.
            return ApiError(403, f"Requests from another site's web page (Sec-Fetch-Site: {site}) are not served: "
                            "start the server with --cors-origin ORIGIN to let a page in.", code="forbidden_origin")
        if self.api_key is not None and not self._authorized(headers.get(b"authorization", b"")):
            return ApiError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>'.",
                            code="invalid_api_key")
        return None

    def _host_allowed(self, host: str, served) -> bool:
        name = _host_name(host)
        if ANY_HOST in self.allowed_hosts or name in self.allowed_hosts:
            return True
        if name == "localhost" or name.endswith(".localhost"):  # RFC 6761: always loopback
            return True
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False  # a domain name: exactly what a rebinding attack sends
        if address.is_loopback:
            return True
        return served is not None and _same_address(address, served[0])

    def _origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.rstrip("/").lower()
        if ANY_HOST in self.cors_origins or origin in self.cors_origins:
            return True
        if origin == "null":  # sandboxed frames, file:// pages: nobody's own origin
            return False
        parts = urlsplit(origin)
        # Its own origin: a page served from this very address (after the Host check).
        return parts.scheme == "http" and bool(parts.netloc) and parts.netloc == host.lower()

    def _authorized(self, header: bytes) -> bool:
        scheme, _, token = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.api_key)

    def _too_big(self) -> ApiError:
        return ApiError(413, f"The request body is over this server's limit of {self.max_body:,} bytes.",
                        code="request_too_large")


def _text(raw: bytes) -> str:
    return raw.decode("latin-1")


def _shown(text: str) -> str:
    """A client's header in our one-line message: quoted, printable and short."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return repr(clean[:80] + ("…" if len(clean) > 80 else ""))


def _host_name(host: str) -> str:
    """``Host``'s name without its port: ``[::1]:8080`` → ``::1``, ``Localhost.:80`` → ``localhost``."""
    host = host.strip().lower()
    if host.startswith("["):
        inside, _, rest = host[1:].partition("]")
        # Anything after the bracket but a port ("[::1].evil") is no address: kept whole, refused.
        return inside if rest == "" or (rest[:1] == ":" and rest[1:].isdigit()) else host
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _same_address(address, served: str) -> bool:
    try:
        return address == ipaddress.ip_address(served.strip("[]").split("%", 1)[0])
    except ValueError:
        return False


async def send_error(send, error: ApiError) -> None:
    body = error.body_bytes()
    await send({"type": "http.response.start", "status": error.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
