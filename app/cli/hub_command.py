"""``tandem search TEXT`` and ``tandem pull REPO[:QUANT]``: models from the Hugging Face Hub.

``search`` lists Tandem's picks that match, then the Hub's GGUF repositories with their
files, quantisations and sizes. ``pull`` plans before it downloads: the quantisation
that fits this machine (or the one named), a draft of the same tokenizer (or the one
named), both judged from their headers (a few MB each), then downloads them into the
Hugging Face cache, resumed where an earlier pull stopped and verified against the
Hub's sha256. Neither loads llama.cpp. ``HF_ENDPOINT`` names another Hub (a mirror).
"""

from __future__ import annotations

import argparse
import json
import sys

from app.cli.fit_command import _size
from app.terminal.arg_types import setting_value, whole


def add_parsers(subcommands) -> None:
    search = subcommands.add_parser(
        "search", help="search the Hugging Face Hub for GGUF models (Tandem's picks first)",
        description="Search the Hugging Face Hub for GGUF repositories whose names hold TEXT, most downloaded first, "
                    "each with its files' quantisations and sizes. Tandem's picks (target + draft pairs for common "
                    "GPU sizes) that match come first.")
    search.add_argument("text", metavar="TEXT", help="what the repository's name holds ('' : Tandem's picks only)")
    search.add_argument("--limit", type=whole(1, 100), default=20, metavar="N", help="repositories listed (default: 20)")
    search.add_argument("--json", action="store_true", help="one JSON object: picks and repositories")

    pull = subcommands.add_parser(
        "pull", help="download a model (and a draft for it) from the Hugging Face Hub, planned to fit first",
        description="Download a GGUF model into the Hugging Face cache, where the library finds it. REPO alone: the "
                    "largest quantisation that fits this machine; REPO:QUANT: that one; hf://REPO/FILE.gguf: that "
                    "file. A draft of the same tokenizer is found on the Hub unless --draft names one or --no-draft. "
                    "An interrupted pull resumes; every file is checked against the Hub's sha256.")
    pull.add_argument("model", metavar="REPO[:QUANT]|hf://REPO/FILE", help="the target")
    pull.add_argument("--draft", metavar="REPO[:QUANT]|hf://REPO/FILE", help="the draft (default: found on the Hub)")
    pull.add_argument("--no-draft", action="store_true", help="download the target alone")
    pull.add_argument("--ctx", "--n-ctx", "-c", dest="n_ctx", type=setting_value("n_ctx"), metavar="N", default=4096,
                      help="context size the plan is made for (default: 4096, as every front end)")
    pull.add_argument("--gpu-memory", type=_size, metavar="SIZE",
                      help="plan for a GPU with this much free memory (e.g. 8GiB; 0: none) instead of NVML's")
    pull.add_argument("--plan-only", action="store_true", help="say what would be downloaded, download nothing")
    pull.add_argument("--json", action="store_true", help="one JSON object: the plan and the files")


def cmd_search(args: argparse.Namespace) -> int:
    from app.hub.files import size_text
    from app.hub.picks import picks_for
    from app.hub.search import search

    picks = picks_for(args.text)
    results = search(args.text, limit=args.limit) if args.text.strip() else []
    if args.json:
        print(json.dumps({
            "picks": [{"name": p.name, "gpu_gb": p.gpu_gb, "target": str(p.target),
                       "draft": str(p.draft) if p.draft else None, "note": p.note} for p in picks],
            "repositories": [{"repo": r.repo, "downloads": r.downloads, "likes": r.likes, "gated": r.gated,
                              "files": [{"file": f.filename, "quant": f.quant, "bytes": f.size, "parts": f.parts,
                                         "sha256": f.sha256} for f in r.files]} for r in results]}))
        return 0
    if picks:
        print("Tandem's picks:")
        for p in picks:
            gpu = f"{p.gpu_gb:g} GB GPU" if p.gpu_gb else "CPU"
            print(f"  {p.name:<32} {gpu:>10}  tandem pull {_spelled(p.target)}"
                  + (f" --draft {_spelled(p.draft)}" if p.draft else ""))
    if not results:
        if args.text.strip():
            print(f"No GGUF repository on the Hub matches {args.text!r}.")
        return 0
    print("On the Hub (most downloaded first):")
    for r in results:
        print(f"  {r.repo}  ({r.downloads:,} downloads{', gated' if r.gated else ''})")
        for f in r.files:
            parts = f" in {f.parts} parts" if f.parts > 1 else ""
            print(f"      {f.quant or '?':<10} {size_text(f.size):>9}{parts}  {f.filename}")
    return 0


def _spelled(file) -> str:
    return f"hf://{file.repo}/{file.filename}" if file.revision is None else str(file)



def cmd_pull(args: argparse.Namespace) -> int:
    from app.hub.download import DownloadCancelled, pull
    from app.hub.files import size_text
    from app.hub.planning import find_draft
    from app.session.fit import read_machine
    from app.session.model_downloads import plan_pull
    from app.terminal.shared import TerminalProgress

    machine = read_machine(args.gpu_memory, build_has_gpu=False)

    def fits(remote):
        return plan_pull(remote, None, n_ctx=args.n_ctx, machine=machine).plan

    target = _resolve(args.model, fits)
    draft = None
    note = "--no-draft"
    if args.draft:
        draft = _resolve(args.draft, None)
        note = ""
    elif not args.no_draft:
        match = find_draft(target)
        note, draft = match.note, match.remote
    planned = plan_pull(target, draft, n_ctx=args.n_ctx, machine=machine, draft_note=note)
    if args.json and args.plan_only:
        print(json.dumps(_as_json(planned)))
        return 0 if planned.plan.fits else 1
    if not args.json:
        print("\n".join(planned.lines(args.n_ctx)))
    if args.plan_only:
        return 0 if planned.plan.fits else 1
    progress = TerminalProgress(sys.stderr)
    paths = []
    try:
        for remote in (target, draft):
            if remote is None:
                continue
            pulled = pull(remote.file, lambda what, done, total: progress(what, done, total))
            progress.done()
            paths.append(pulled)
    except KeyboardInterrupt:
        progress.done()
        print("tandem: download stopped; 'tandem pull' again resumes it", file=sys.stderr)
        return 130
    except DownloadCancelled:
        progress.done()
        raise
    names = [f"{p.file.repo}/{p.file.filename}" for p in paths]
    if args.json:
        out = _as_json(planned)
        out["downloaded"] = [{"name": n, "path": str(p.path), "bytes": p.size, "downloaded": p.downloaded,
                              "resumed": p.resumed, "verified": p.verified} for n, p in zip(names, paths)]
        print(json.dumps(out))
        return 0
    for n, p in zip(names, paths):
        how = "verified against the Hub's sha256" if p.verified else "size checked (the Hub gave no sha256)"
        state = "already here" if p.downloaded == 0 and p.resumed == 0 else (
            f"resumed at {size_text(p.resumed)}" if p.resumed else "downloaded")
        print(f"{n}: {state}, {how}")
    command = f"tandem chat --target {names[0]}" + (f" --draft {names[1]}" if len(names) > 1 else "")
    print(f"Chat with it: {command}")
    return 0


def _resolve(text: str, fits):
    """A RemoteModel for ``text``: hf://REPO/FILE, or REPO[:QUANT] (the best that fits,
    or a draft's usual file when ``fits`` is None)."""
    from app.hub.files import is_hub_name, parse_file, parse_repo
    from app.hub.planning import draft_in_repo, repo_choice
    from app.hub.remote_header import read_remote_model

    if is_hub_name(text):
        return read_remote_model(parse_file(text))
    asked = parse_repo(text)
    if fits is None and not asked.quant:
        return draft_in_repo(asked)
    return repo_choice(asked, fits or (lambda remote: None)).remote


def _as_json(planned) -> dict:
    target, draft, plan = planned.target, planned.draft, planned.plan
    return {"target": {"file": str(target.file), "bytes": target.size, "header_bytes": target.header_bytes},
            "draft": ({"file": str(draft.file), "bytes": draft.size, "header_bytes": draft.header_bytes}
                      if draft is not None else None),
            "compatible": None if planned.verdict is None else planned.verdict.ok, "draft_note": planned.draft_note,
            "fits": plan.fits, "gpu_bytes": plan.gpu_bytes, "ram_bytes": plan.ram_bytes,
            "download_bytes": planned.download, "free_disk_bytes": planned.free}
