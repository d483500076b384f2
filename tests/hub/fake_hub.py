"""A Hugging Face Hub on 127.0.0.1, for tests without the internet.

It answers the routes huggingface_hub 2.x and Tandem use, as the real Hub documents
them and as ``huggingface_hub``'s own code reads them:

- ``GET /api/models?search=&filter=&sort=&limit=`` (``HfApi.list_models``): a JSON
  list of models, ``id``, ``downloads``, ``likes``, ``tags``, ``gated``;
- ``GET /api/models/ORG/NAME[/revision/REV]?blobs=true`` (``HfApi.model_info`` with
  ``files_metadata``): ``id``, ``sha``, ``siblings`` with ``rfilename``, ``size``,
  ``blobId`` and ``lfs: {sha256, size, pointerSize}``; 404 with ``X-Error-Code:
  RepoNotFound`` (``RevisionNotFound``) otherwise;
- ``HEAD|GET /ORG/NAME/resolve/REV/PATH``: a 302 to the file's content on another host
  (``localhost`` where the Hub is ``127.0.0.1``: a CDN), carrying ``X-Repo-Commit``,
  ``X-Linked-Etag`` (the LFS sha256, quoted), ``X-Linked-Size`` and ``ETag``;
  ``X-Error-Code: EntryNotFound`` for a file the repository lacks;
- ``GET /cdn/SHA256``: the bytes, with ``Accept-Ranges``, ``Range`` answered by 206
  and ``Content-Range``. The CDN refuses (403) a request that carries the user's
  ``Authorization``: a client must not send the token off the Hub.

Faults, per file, for the tests of failure: answer statuses first (``statuses``),
close the connection after some bytes (``drop_after``), serve other bytes than the
hash says (``corrupt``), ignore ranges (``no_range``), or wait before answering
(``delay_s``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class HubFileSpec:
    data: bytes
    sha256: str = ""
    statuses: list[int] = field(default_factory=list)  # answered (then removed) before the bytes
    drop_after: list[int] = field(default_factory=list)  # each GET closes after this many bytes (then removed)
    corrupt: bool = False
    no_range: bool = False
    delay_s: float = 0.0
    gets: int = 0
    ranges: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sha256 = self.sha256 or hashlib.sha256(self.data).hexdigest()


@dataclass
class HubRepoSpec:
    files: dict[str, HubFileSpec]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    downloads: int = 0
    likes: int = 0
    tags: tuple[str, ...] = ("gguf",)
    gated: bool = False


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, HubRepoSpec] = {}
        self.token_leaks: list[str] = []   # CDN requests that carried Authorization
        self.requests: list[str] = []
        self.api_statuses: list[int] = []  # answered (then removed) by the next API requests
        self.authorized: list[str] = []    # Hub requests (not the CDN's) that carried a token
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add(self, repo: str, files: dict[str, bytes | HubFileSpec], **kw) -> HubRepoSpec:
        specs = {name: f if isinstance(f, HubFileSpec) else HubFileSpec(f) for name, f in files.items()}
        self.repos[repo] = HubRepoSpec(specs, **kw)
        return self.repos[repo]

    def add_file(self, repo: str, name: str, path: Path, **kw) -> HubFileSpec:
        spec = HubFileSpec(Path(path).read_bytes(), **kw)
        self.repos[repo].files[name] = spec
        return spec

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> FakeHub:
        hub = self

        class Handler(_Handler):
            owner = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def file(self, repo: str, name: str) -> HubFileSpec:
        return self.repos[repo].files[name]


class _Handler(BaseHTTPRequestHandler):
    owner: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, status: int, body, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, code: str, message: str) -> None:
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        hub = self.owner
        url = urlparse(self.path)
        path = unquote(url.path)
        hub.requests.append(f"{self.command} {self.path}")
        if path.startswith("/cdn/"):
            return self._cdn(path[len("/cdn/"):])
        if self.headers.get("Authorization", "").startswith("Bearer "):
            hub.authorized.append(path)
        if path.startswith("/api/") and hub.api_statuses:
            status = hub.api_statuses.pop(0)
            return self._json(status, {"error": f"HTTP {status}"})
        if path == "/api/models":
            return self._search(parse_qs(url.query))
        if path.startswith("/api/models/"):
            return self._info(path[len("/api/models/"):], parse_qs(url.query))
        parts = path.strip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        self._error(404, "RepoNotFound", "Repository not found")

    def _search(self, query) -> None:
        hub = self.owner
        text = (query.get("search") or [""])[0].lower()
        wanted = query.get("filter") or []
        limit = int((query.get("limit") or ["1000"])[0])
        found = [(name, r) for name, r in hub.repos.items()
                 if text in name.lower() and all(tag in r.tags for tag in wanted)]
        found.sort(key=lambda item: -item[1].downloads)
        self._json(200, [{"_id": name, "id": name, "modelId": name, "downloads": r.downloads, "likes": r.likes,
                          "tags": list(r.tags), "private": False, "gated": r.gated, "library_name": "gguf"}
                         for name, r in found[:limit]])

    def _info(self, rest: str, query) -> None:
        hub = self.owner
        parts = rest.split("/")
        repo = "/".join(parts[:2])
        spec = hub.repos.get(repo)
        if spec is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        if spec.gated and not self.headers.get("Authorization"):
            return self._error(401, "GatedRepo", "Access to this model is restricted")
        if len(parts) > 2 and (parts[2] != "revision" or parts[3] not in ("main", spec.sha)):
            return self._error(404, "RevisionNotFound", "Revision not found")
        blobs = (query.get("blobs") or [""])[0].lower() == "true"
        siblings = []
        for name, f in spec.files.items():
            item = {"rfilename": name}
            if blobs:
                item.update(size=len(f.data), blobId=hashlib.sha1(f.data).hexdigest(),
                            lfs={"sha256": f.sha256, "size": len(f.data), "pointerSize": 134})
            siblings.append(item)
        self._json(200, {"_id": repo, "id": repo, "modelId": repo, "sha": spec.sha, "private": False,
                         "gated": spec.gated, "downloads": spec.downloads, "likes": spec.likes,
                         "tags": list(spec.tags), "siblings": siblings, "library_name": "gguf"})

    def _resolve(self, repo: str, revision: str, name: str) -> None:
        hub = self.owner
        spec = hub.repos.get(repo)
        if spec is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        if spec.gated and not self.headers.get("Authorization"):
            return self._error(401, "GatedRepo", "Access to this model is restricted")
        if revision not in ("main", spec.sha):
            return self._error(404, "RevisionNotFound", "Revision not found")
        f = spec.files.get(name)
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        cdn = f"http://localhost:{hub.port}/cdn/{f.sha256}"
        self.send_response(302)
        for k, v in {"Location": cdn, "X-Repo-Commit": spec.sha, "X-Linked-Etag": f'"{f.sha256}"',
                     "X-Linked-Size": str(len(f.data)), "ETag": f'"{hashlib.sha1(f.data).hexdigest()}"',
                     "Content-Length": "0"}.items():
            self.send_header(k, v)
        self.end_headers()

    def _cdn(self, sha: str) -> None:
        hub = self.owner
        if self.headers.get("Authorization"):
            hub.token_leaks.append(self.path)
            return self._json(403, {"error": "a signed URL takes no Authorization"})
        f = next((f for r in hub.repos.values() for f in r.files.values() if f.sha256 == sha), None)
        if f is None:
            return self._json(404, {"error": "no such object"})
        if self.command == "GET":
            f.gets += 1
        if f.delay_s:
            time.sleep(f.delay_s)
        if f.statuses and self.command == "GET":
            status = f.statuses.pop(0)
            return self._json(status, {"error": f"HTTP {status}"}, {"Retry-After": "0"})
        data = bytearray(f.data)
        if f.corrupt and data:
            data[len(data) // 2] ^= 0xFF
        start, end = 0, len(data) - 1
        asked = self.headers.get("Range")
        if asked and self.command == "GET":
            f.ranges.append(asked)
        partial = False
        if asked and not f.no_range and asked.startswith("bytes="):
            first, _, last = asked[len("bytes="):].partition("-")
            start = int(first)
            end = min(int(last), len(data) - 1) if last else len(data) - 1
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            partial = True
        body = bytes(data[start:end + 1])
        self.send_response(206 if partial else 200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{f.sha256}"')
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if self.command == "HEAD":
            return
        if f.drop_after and self.command == "GET":
            cut = f.drop_after.pop(0)
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            try:
                import socket
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (a header read, a cancel)
