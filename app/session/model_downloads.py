"""A download planned before it starts, for every front end (``tandem pull``, File → Get
models…): the target and its draft known from their headers (``app.hub``), the pair
judged by check-pair's rules, planned onto this machine at the settings' context and
GPU layers (``app.session.fit``), and the download set against the free disk."""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.gguf.memory_plan import AUTO, GpuLayers, PairPlan
from app.engine.gguf.meta import Compatibility, pair_verdict
from app.hub.download import DISK_MARGIN, free_disk, hub_cache
from app.hub.files import HubFile, HubRepo, size_text
from app.hub.remote_header import RemoteModel
from app.session.fit import Machine, describe, plan_files, read_machine, refusal


@dataclass(frozen=True)
class PullPlan:
    target: RemoteModel
    draft: RemoteModel | None
    draft_note: str                  # why there is no draft, or what the draft is
    plan: PairPlan
    verdict: Compatibility | None    # the pair check (None: no draft)
    download: int                    # bytes to download (what the cache lacks is not judged here)
    free: int                        # bytes free for the Hub cache

    @property
    def disk_ok(self) -> bool:
        return self.download + DISK_MARGIN <= self.free

    def lines(self, n_ctx: int) -> list[str]:
        out = [f"Target: {_name(self.target.file)} ({self.target.file.quant or 'GGUF'}, {size_text(self.target.size)})"]
        if self.draft is not None:
            words = "drafts for it token for token" if self.verdict is not None and self.verdict.ok and \
                not self.verdict.through_text else (self.verdict.reason if self.verdict is not None else "")
            out.append(f"Draft: {_name(self.draft.file)} ({size_text(self.draft.size)}): {words}")
        else:
            out.append(f"Draft: none ({self.draft_note})")
        out.append(("Fits: " + describe(self.plan)) if self.plan.fits
                   else ("Does not fit: " + refusal(self.plan, n_ctx)))
        out.append(f"Download: {size_text(self.download)}; free disk for the Hugging Face cache ({hub_cache()}): "
                   f"{size_text(self.free)}" + ("" if self.disk_ok else " - not enough"))
        return out


def _name(file: HubFile) -> str:
    return f"{file.repo}/{file.filename}"


def plan_pull(target: RemoteModel, draft: RemoteModel | None, *, n_ctx: int, machine: Machine | None = None,
              target_gpu_layers: GpuLayers = AUTO, draft_gpu_layers: GpuLayers = AUTO,
              flash_attention: str = "auto", draft_note: str = "") -> PullPlan:
    machine = machine or read_machine()
    plan = plan_files(target.model, draft.model if draft is not None else None, n_ctx=n_ctx, machine=machine,
                      target_gpu_layers=target_gpu_layers, draft_gpu_layers=draft_gpu_layers,
                      flash_attention=flash_attention)
    verdict = pair_verdict(target.model.metadata, draft.model.metadata) if draft is not None else None
    size = target.size + (draft.size if draft is not None else 0)
    return PullPlan(target, draft, draft_note, plan, verdict, size, free_disk())


def plan_choice(target: HubFile, draft: HubFile | None, *, find: bool, n_ctx: int,
                target_gpu_layers: GpuLayers = AUTO, draft_gpu_layers: GpuLayers = AUTO,
                flash_attention: str = "auto") -> PullPlan:
    """The plan of ``target`` with ``draft``, or (``find``) with a draft found on the Hub."""
    from app.hub.planning import find_draft
    from app.hub.remote_header import read_remote_model

    target_remote = read_remote_model(target)
    note = ""
    draft_remote = None
    if draft is not None:
        draft_remote = read_remote_model(draft)
    elif find:
        match = find_draft(target_remote)
        draft_remote, note = match.remote, match.note
    else:
        note = "none asked for"
    return plan_pull(target_remote, draft_remote, n_ctx=n_ctx, target_gpu_layers=target_gpu_layers,
                     draft_gpu_layers=draft_gpu_layers, flash_attention=flash_attention, draft_note=note)


def plan_repo(asked: HubRepo, *, n_ctx: int, target_gpu_layers: GpuLayers = AUTO,
              draft_gpu_layers: GpuLayers = AUTO, flash_attention: str = "auto") -> PullPlan:
    """A repository's best quantisation for this machine (``app.hub.planning``), with a
    draft found on the Hub."""
    from app.hub.planning import repo_choice

    machine = read_machine()
    options = dict(n_ctx=n_ctx, target_gpu_layers=target_gpu_layers, draft_gpu_layers=draft_gpu_layers,
                   flash_attention=flash_attention)
    choice = repo_choice(asked, lambda remote: plan_pull(remote, None, machine=machine, **options).plan)
    return plan_choice(choice.file, None, find=True, **options)
