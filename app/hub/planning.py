"""Planning a download from headers alone: which of a repository's quantisations fits
this machine, and which small model on the Hub drafts for it.

The quantisation: the largest quantised file whose plan (``app.session.fit``) fits,
on a GPU wholly on it where any does; float files only where the repository has
nothing else. Each candidate costs a header read (``remote_header``), largest first,
at most ``HEADERS_MOST`` of them.

The draft: candidates are Tandem's picks, the target's own repository's small
quantisations (the same model, quantised harder), and the Hub's GGUF repositories of the
target's family (its ``general.basename``, else its repository's name without the
size), smallest first; the first whose header passes the pair check token for token
(``pair_verdict``) is the draft. A target with its own MTP head needs none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.engine.gguf.meta import Compatibility, pair_verdict
from app.engine.gguf.memory_plan import PairPlan
from app.hub.connection import HubError
from app.hub.files import HubFile, HubRepo
from app.hub.remote_header import RemoteModel, read_remote_model
from app.hub.search import RepoFile, RepoResult, repo_files, search

HEADERS_MOST = 6           # quantisations whose headers a choice reads at most
DRAFT_CANDIDATES = 6       # draft repositories looked at
DRAFT_SHARE = 0.25         # a draft is at most this share of the target's size
_FLOAT = {"F32", "F16", "BF16"}


@dataclass(frozen=True)
class Choice:
    file: HubFile
    remote: RemoteModel
    plan: PairPlan


def choose_file(result: RepoResult, asked: HubRepo, fits) -> Choice:
    """``asked.quant``'s file, or the best that ``fits(RemoteModel) -> PairPlan`` says
    fits; HubError naming what the repository has when nothing does."""
    models = [f for f in result.files]
    if not models:
        raise HubError(f"{result.repo} has no GGUF model files")
    if asked.quant:
        named = [f for f in models if f.quant == asked.quant]
        if not named:
            have = ", ".join(sorted({f.quant or f.filename for f in models}))
            raise HubError(f"{result.repo} has no {asked.quant} file (it has {have})")
        file = HubFile(result.repo, named[0].filename, asked.revision or result.revision)
        remote = read_remote_model(file)
        return Choice(file, remote, fits(remote))
    quantised = [f for f in models if f.quant not in _FLOAT] or models
    tried: list[Choice] = []
    for candidate in sorted(quantised, key=lambda f: -f.size)[:HEADERS_MOST]:
        file = HubFile(result.repo, candidate.filename, asked.revision or result.revision)
        remote = read_remote_model(file)
        choice = Choice(file, remote, fits(remote))
        if choice.plan.fits and (not choice.plan.gpu_free or _all_on_gpu(choice.plan)):
            return choice
        tried.append(choice)
    fitting = [c for c in tried if c.plan.fits]
    if fitting:
        return fitting[0]  # the largest that fits, partly offloaded
    smallest = min(quantised, key=lambda f: f.size)
    raise HubError(f"no quantisation of {result.repo} fits this machine (the smallest, {smallest.quant or smallest.filename}, "
                   f"is {smallest.size / 1e9:.1f} GB); see 'tandem fit'")


def _all_on_gpu(plan: PairPlan) -> bool:
    return all(p.whole for p in plan.models)


@dataclass(frozen=True)
class DraftMatch:
    file: HubFile | None
    remote: RemoteModel | None
    verdict: Compatibility | None
    note: str  # what was found, for the user


def own_head(target: RemoteModel) -> bool:
    meta = target.model.metadata
    return meta.mtp_layers > 0 and meta.mtp_problem is None


def find_draft(target: RemoteModel, candidates: list[HubFile] | None = None) -> DraftMatch:
    """A draft for ``target`` from ``candidates`` (None: Tandem's picks and the Hub's
    repositories of the target's family), judged from the headers."""
    if own_head(target):
        return DraftMatch(None, None, None, "it drafts with its own MTP head; no draft is needed")
    if candidates is None:
        candidates = _candidates(target)
    limit = target.size * DRAFT_SHARE
    for file in candidates:
        try:
            draft = read_remote_model(file)
        except Exception:  # one candidate that cannot be read leaves the others
            continue
        if draft.size > limit:
            continue
        verdict = pair_verdict(target.model.metadata, draft.model.metadata)
        if verdict.ok and not verdict.through_text:
            return DraftMatch(file, draft, verdict, f"{file} drafts for it token for token")
    return DraftMatch(None, None, None, "no draft of the same tokenizer was found on the Hub; "
                      "it runs with prompt lookup, or name a draft yourself")


def family_of(target: RemoteModel) -> str:
    """What the target's relatives are called: its ``general.basename``, else the
    repository's name without its size and format ('Qwen2.5-7B-Instruct-GGUF' ->
    'Qwen2.5')."""
    name = target.file.repo.split("/", 1)[1]
    name = re.sub(r"(?i)[-_.]?gguf$", "", name)
    stem = re.split(r"(?i)[-_](?:\d+(?:\.\d+)?[BM])(?:[-_]|$)", name)[0]
    return stem or name


def _candidates(target: RemoteModel) -> list[HubFile]:
    from app.hub.picks import load_picks

    seen: set[HubFile] = set()
    found: list[HubFile] = []
    _, picks = load_picks()
    for pick in picks:
        if pick.draft is not None and pick.target.repo == target.file.repo and pick.draft not in seen:
            seen.add(pick.draft)
            found.append(pick.draft)
    family = family_of(target)
    sized: list[tuple[int, HubFile]] = []
    try:  # the target's own repository: a small quantisation of the same model drafts too
        own = repo_files(target.file.repo, target.file.revision)
        small = draft_file(RepoResult(own.repo, files=tuple(f for f in own.files
                                                               if f.size <= target.size * DRAFT_SHARE)))
        if small is not None:
            sized.append((small.size, HubFile(own.repo, small.filename, target.file.revision)))
    except Exception:  # a listing that fails leaves the search
        pass
    for result in search(family, limit=DRAFT_CANDIDATES * 2, with_files=DRAFT_CANDIDATES * 2):
        if result.repo == target.file.repo or not result.files:
            continue
        small = draft_file(result)
        if small is not None and small.size <= target.size * DRAFT_SHARE:
            sized.append((small.size, HubFile(result.repo, small.filename, result.revision)))
    for _, file in sorted(sized, key=lambda item: item[0])[:DRAFT_CANDIDATES]:
        if file not in seen:
            seen.add(file)
            found.append(file)
    return found


def draft_file(result: RepoResult) -> RepoFile | None:
    """A repository's file to draft with: Q8_0 where it has one (a draft's quality buys
    acceptance, and it is small anyway), else its smallest Q4, else its smallest."""
    by_quant = {f.quant: f for f in result.files}
    for quant in ("Q8_0", "Q4_K_M", "Q4_0"):
        if quant in by_quant:
            return by_quant[quant]
    return min(result.files, key=lambda f: f.size) if result.files else None


def repo_choice(asked: HubRepo, fits) -> Choice:
    return choose_file(repo_files(asked.repo, asked.revision), asked, fits)


def draft_in_repo(asked: HubRepo) -> RemoteModel:
    """The file of ``asked``'s repository to draft with (``draft_file``), read from its header."""
    listed = repo_files(asked.repo, asked.revision)
    chosen = draft_file(listed)
    if chosen is None:
        raise HubError(f"{asked.repo} has no GGUF model files")
    return read_remote_model(HubFile(asked.repo, chosen.filename, asked.revision or listed.revision))
