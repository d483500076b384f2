"""A GGUF file on the Hub, known from its header alone: read with HTTP range requests
(the metadata and the tensor infos, never the weights) and checked by the same walk
as a file on disk (``app.engine.gguf.header.scan_header_prefix``), so ``tandem fit``
and the pair check answer for it before it is downloaded.

The read starts with ``FIRST_READ`` bytes and asks for the rest only when the header
goes on past them, up to ``MOST_HEADER`` bytes in all: a header is metadata and
tensor names (a 262k vocabulary is about 8 MB), and one that claims more than that
is not read further.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from app.engine.gguf.header import NeedMoreBytes, scan_header_prefix
from app.engine.gguf.model_file import FileIdentity, ModelFile, model_file_from, wanted_keys
from app.hub.connection import HubError, auth_headers, hub_errors, raise_for_status, retrying, session, timeout
from app.hub.files import HubFile, parts_of

FIRST_READ = 2 << 20     # bytes: most headers (a 50k-150k vocabulary) end well inside them
MOST_HEADER = 64 << 20   # bytes: a header claiming more than this is refused


@dataclass(frozen=True)
class RemoteModel:
    """A Hub file's header as a ``ModelFile`` (what ``fit`` and the pair check take),
    and what was read to learn it."""

    file: HubFile
    model: ModelFile
    size: int          # bytes of the whole model (every part)
    header_bytes: int  # bytes read over the network


def url_of(file: HubFile) -> str:
    from huggingface_hub import hf_hub_url

    from app.hub.connection import endpoint

    return hf_hub_url(file.repo, file.filename, revision=file.revision, endpoint=endpoint())


def read_remote_model(file: HubFile) -> RemoteModel:
    """``file``'s header (and each other part's, for a split model) as a ModelFile named
    ``str(file)``; HubError or ModelFileError in one line."""
    shown = Path(f"{file.repo}/{file.filename}")
    with hub_errors(f"{file}"):
        header, values, size, read = _read_header(file, shown)
        size_all = size
        tensors = list(header.tensors)
        for part in parts_of(file.filename)[1:]:
            part_file = replace(file, filename=part)
            part_header, _, part_size, part_read = _read_header(part_file, Path(f"{file.repo}/{part}"))
            tensors += part_header.tensors
            size_all += part_size
            read += part_read
        if len(tensors) != len(header.tensors):
            header = replace(header, tensors=tuple(tensors))
    identity = FileIdentity(0, 0, size_all, 0, 0)
    model = model_file_from(shown, shown, identity, header, values, parts_read=True)
    return RemoteModel(file, model, size_all, read)


def _read_header(file: HubFile, shown: Path):
    """(header, values, file size, bytes read) of one file."""
    prefix, size = _read_range(file, 0, FIRST_READ)
    while True:
        try:
            header, values = scan_header_prefix(prefix, size, wanted_keys, name=shown)
            return header, values, size, len(prefix)
        except NeedMoreBytes as more:
            if more.needed > MOST_HEADER:
                raise HubError(f"{file}: its header goes on past {MOST_HEADER >> 20} MiB; not read further "
                               "(a model's header is a few MB)") from None
            want = min(size, MOST_HEADER, max(more.needed + (1 << 20), 2 * len(prefix)))
            extra, again = _read_range(file, len(prefix), want - len(prefix))
            if again != size:
                raise HubError(f"{file}: changed on the Hub while its header was read; try again")
            prefix += extra


def _read_range(file: HubFile, start: int, length: int) -> tuple[bytes, int]:
    """Up to ``length`` bytes from ``start``, and the file's whole size (from the
    answer's Content-Range; a server that ignores ranges answers 200 with the whole
    file, of which only what was asked for is read)."""
    url = url_of(file)

    def attempt() -> tuple[bytes, int]:
        headers = {**auth_headers(), "Range": f"bytes={start}-{start + length - 1}"}
        with session().stream("GET", url, headers=headers, timeout=timeout(), follow_redirects=True) as response:
            raise_for_status(response)
            size = _whole_size(response, start)
            skip = start if response.status_code == 200 else 0
            data = bytearray()
            for chunk in response.iter_bytes():
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                data += chunk
                if len(data) >= length:
                    break
            return bytes(data[:length]), size

    data, size = retrying(attempt)
    if not data and start < size:
        raise HubError(f"{file}: the Hub sent no bytes of it")
    return data, size


def _whole_size(response, start: int) -> int:
    if response.status_code == 206:
        content_range = response.headers.get("Content-Range", "")
        total = content_range.rpartition("/")[2]
        if not total.isdigit():
            raise HubError(f"the Hub's answer to a range request has no size (Content-Range {content_range!r})")
        return int(total)
    length = response.headers.get("Content-Length", "")
    if not length.isdigit():
        raise HubError("the Hub's answer has no size (no Content-Range, no Content-Length)")
    return int(length)
