"""Finding GGUF repositories on the Hub, and what each one holds.

``search`` asks the Hub's model search (``/api/models``, GGUF repositories only, most
downloaded first); ``repo_files`` lists one repository's model files with their
sizes and quantisations (``HfApi.model_info`` with the files' metadata: sizes and the
LFS sha256 a download is checked against).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from app.hub.connection import endpoint, hub_errors, retrying
from app.hub.files import first_part, parts_of, quant_of

SEARCH_MOST = 20        # repositories a search lists
FILES_FOR = 8           # of those, the first ones whose files are listed too (a request each)
_NOT_MODELS = ("mmproj", "imatrix")  # GGUF files beside a model that are not one


@dataclass(frozen=True)
class RepoFile:
    """One model of a repository: a whole file, or a split model's first part standing
    for all of them (``size``: every part's)."""

    filename: str
    size: int
    quant: str
    sha256: str | None  # the LFS oid of the first part (None: not stored in LFS)
    parts: int = 1


@dataclass(frozen=True)
class RepoResult:
    repo: str
    downloads: int = 0
    likes: int = 0
    revision: str | None = None           # the commit the files were listed at
    files: tuple[RepoFile, ...] = field(default=())
    gated: bool = False


def _api():
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint())


def search(text: str, *, limit: int = SEARCH_MOST, with_files: int = FILES_FOR) -> list[RepoResult]:
    """GGUF repositories whose names hold ``text``, most downloaded first; the first
    ``with_files`` of them with their model files.

    The Hub's ``GET /api/models`` (what ``HfApi.list_models`` asks), requested here in one
    page: huggingface_hub's paginator retries a refused connection for half a minute,
    where an offline user should get one line at once."""
    from app.hub.connection import auth_headers, raise_for_status, session, timeout

    params = {"search": text, "filter": "gguf", "sort": "downloads", "direction": "-1", "limit": str(limit)}

    def ask():
        response = session().get(f"{endpoint()}/api/models", params=params, headers=auth_headers(),
                                 timeout=timeout())
        raise_for_status(response)
        return response.json()

    with hub_errors(f"searching the Hub for {text!r}"):
        found = retrying(ask)
        if not isinstance(found, list):
            raise ValueError("not a list of models")
    results = [RepoResult(m["id"], _count(m.get("downloads")), _count(m.get("likes")), gated=bool(m.get("gated")))
               for m in found[:limit] if isinstance(m, dict) and isinstance(m.get("id"), str) and "/" in m["id"]]
    if not results or with_files <= 0:
        return results
    head = results[:with_files]
    with ThreadPoolExecutor(max_workers=4) as pool:
        listed = list(pool.map(_files_or_none, [r.repo for r in head]))
    return [listed[i] or r for i, r in enumerate(head)] + results[with_files:]


def _count(value) -> int:
    return value if type(value) is int and value >= 0 else 0


def _files_or_none(repo: str) -> RepoResult | None:
    try:
        return repo_files(repo)
    except Exception:  # one repository that will not list leaves the others listed
        return None


def repo_files(repo: str, revision: str | None = None) -> RepoResult:
    """``repo``'s GGUF models (split ones as one), smallest first."""
    with hub_errors(f"listing {repo}"):
        info = retrying(lambda: _api().model_info(repo, revision=revision, files_metadata=True))
        siblings = {s.rfilename: s for s in info.siblings or ()}
    files = []
    for name, sibling in siblings.items():
        base = name.rsplit("/", 1)[-1].lower()
        if not base.endswith(".gguf") or base.startswith(_NOT_MODELS) or not first_part(name):
            continue
        parts = parts_of(name)
        size = sum(int(getattr(siblings.get(p), "size", 0) or 0) for p in parts)
        lfs = sibling.lfs
        files.append(RepoFile(name, size, quant_of(name), getattr(lfs, "sha256", None) if lfs else None, len(parts)))
    files.sort(key=lambda f: (f.size, f.filename))
    return RepoResult(repo, int(info.downloads or 0), int(info.likes or 0), info.sha, tuple(files),
                      bool(info.gated))
