"""The loaded pair as Ollama describes a model: ``/api/tags``, ``/api/show`` and
``/api/ps`` entries, from the target's GGUF header (read once, off the event loop,
by the library's reader, so a file is described here as in the library dialog)."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path

from app.library.entries import LibraryEntry, parameters_shown, read_entry
from app.server.ollama_requests import TAG
from app.session.chat_types import LoadInfo

# The release of Ollama whose API these routes follow; clients compare it to gate features.
OLLAMA_API_VERSION = "0.5.0"
# /api/ps: when the pair would be unloaded. Never while the server runs, as Ollama's keep_alive -1.
NEVER = "2318-01-01T00:00:00Z"


def timestamp(seconds: float | None = None) -> str:
    """RFC 3339 in UTC, as Ollama writes ``created_at``."""
    moment = datetime.now(timezone.utc) if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ModelCard:
    """What the Ollama routes say of the loaded pair."""

    def __init__(self, model_id: str, info, defaults, *, entry: LibraryEntry | None = None) -> None:
        self.model_id = model_id
        self.name = model_id + TAG
        self.info = info if info is not None else LoadInfo(target_name=model_id, target_path="")
        self.defaults = defaults
        path = self.info.target_path
        self.entry = entry if entry is not None else (read_entry(Path(path), model_id, "Tandem") if path else None)
        self.template = _chat_template(path) if path and self.entry is not None and self.entry.usable else ""

    @property
    def size(self) -> int:
        return self.entry.size if self.entry else 0

    @property
    def modified_at(self) -> str:
        signature = self.entry.signature if self.entry else ()
        return timestamp(signature[0][2] / 1e9) if signature else timestamp(0)

    @property
    def digest(self) -> str:
        """Not a hash of the weights (that would read gigabytes): of the file's path, size
        and time, so it changes when the file does."""
        signature = repr(self.entry.signature if self.entry else self.model_id)
        return hashlib.sha256(signature.encode("utf-8", "surrogateescape")).hexdigest()

    def details(self) -> dict:
        entry = self.entry
        family = entry.architecture if entry else ""
        return {"parent_model": "", "format": "gguf", "family": family, "families": [family] if family else None,
                "parameter_size": parameters_shown(entry.n_parameters) if entry else "",
                "quantization_level": entry.quantisation if entry else ""}

    def tandem(self) -> dict:
        info = self.info
        return {"target": self.model_id, "draft": info.draft_name, "drafter": str(info.drafter),
                "speculation": info.speculation_available, "compute": info.compute}

    def listed(self) -> dict:
        return {"name": self.name, "model": self.name, "modified_at": self.modified_at, "size": self.size,
                "digest": self.digest, "details": self.details(), "tandem": self.tandem()}

    def running(self) -> dict:
        on_gpu = self.info.compute != "CPU"
        return {"name": self.name, "model": self.name, "size": self.size, "digest": self.digest,
                "details": self.details(), "expires_at": NEVER, "size_vram": self.size if on_gpu else 0,
                "context_length": self.info.n_ctx, "tandem": self.tandem()}

    def shown(self) -> dict:
        entry = self.entry
        arch = entry.architecture if entry else ""
        model_info = {"general.architecture": arch, "general.basename": entry.model_name if entry else "",
                      "general.parameter_count": entry.n_parameters if entry else 0}
        if entry and entry.context_length:
            model_info[f"{arch}.context_length"] = entry.context_length
        sampling = self.defaults.sampling
        parameters = [("temperature", sampling.temperature), ("top_k", sampling.top_k), ("top_p", sampling.top_p),
                      ("min_p", sampling.min_p), ("num_ctx", self.info.n_ctx)]
        path = self.info.target_path
        return {"modelfile": f"# Served by Tandem: the target of a speculative pair\nFROM {path}\n",
                "parameters": "\n".join(f"{name:<30} {value}" for name, value in parameters),
                "template": self.template, "details": self.details(), "model_info": model_info,
                "capabilities": ["completion"], "modified_at": self.modified_at, "tandem": self.tandem()}


def _chat_template(path: str) -> str:
    """The model's own chat template (Jinja, not Ollama's Go templates), for display."""
    from app.engine.gguf.model_file import open_model_file

    try:
        return open_model_file(path).metadata.chat_template or ""  # the load's own read, unless the file changed
    except Exception:  # noqa: BLE001 — a description, never a reason to fail a route
        return ""
