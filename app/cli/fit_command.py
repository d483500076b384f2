"""``tandem fit TARGET [DRAFT]``: will the pair fit this machine, and how is it split?

Reads the two headers and the machine's free memory (``app/session/fit.py``); loads
nothing, so it answers for a 70B model in a second. ``--gpu-memory`` plans for a GPU
with that much free memory instead of the one NVML sees (or none).

A file on the Hugging Face Hub (``hf://ORG/REPO/FILE.gguf``) is planned from its header,
read with range requests (``app.hub.remote_header``: a few MB, never the weights); the
plan then also says what the download costs against the free disk, and whether the
two files make a pair.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.terminal.arg_types import gpu_layers_value, setting_value

FLASH_CHOICES = ("auto", "on", "off")


def add_parser(subcommands) -> None:
    fit = subcommands.add_parser(
        "fit", help="will TARGET (and DRAFT) fit this machine's GPU and memory, and how are they split?",
        description="Plan a target and its draft onto the GPU before loading: the draft wholly first, then as many "
                    "target layers as fit, the rest in system memory. Reads only the files' headers.")
    fit.add_argument("target_path", type=_model_path, metavar="TARGET",
                     help="the target GGUF, a file or hf://ORG/REPO/FILE.gguf on the Hugging Face Hub")
    fit.add_argument("draft_path", type=_model_path, metavar="DRAFT", nargs="?",
                     help="the draft GGUF, a file or hf://... (default: none)")
    fit.add_argument("--ctx", "--n-ctx", "-c", dest="n_ctx", type=setting_value("n_ctx"), metavar="N", default=4096,
                     help="context size in tokens (default: 4096, as every front end)")
    fit.add_argument("--gpu-memory", type=_size, metavar="SIZE",
                     help="plan for a GPU with this much free memory (e.g. 8GiB, 512MiB; 0: none) instead of "
                          "the one NVML reports")
    fit.add_argument("--gpu-layers", "-ngl", type=gpu_layers_value, metavar="N|auto", default="auto",
                     help="target layers on the GPU (default: auto, as many as fit beside the draft)")
    fit.add_argument("--draft-gpu-layers", "-ngld", type=gpu_layers_value, metavar="N|auto", default="auto",
                     help="draft layers on the GPU (default: auto, all of them if they fit)")
    fit.add_argument("--flash-attn", choices=FLASH_CHOICES, default="auto",
                     help="flash attention, as the load would run it (default: auto)")
    fit.add_argument("--json", action="store_true", help="one JSON object: each model's parts, the plan, fits")


def _model_path(text: str):
    """A local path, or a Hub file (``hf://``) checked for its spelling here."""
    from app.hub.files import HubNameError, is_hub_name, parse_file

    if is_hub_name(text):
        try:
            return parse_file(text)
        except HubNameError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return Path(text)


def _size(text: str) -> int:
    from app.session.fit import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_fit(args: argparse.Namespace) -> int:
    """Exit 0 when the pair fits, 1 when it does not (the plan is printed either way)."""
    from app.session.fit import plan_files, read_machine

    machine = read_machine(args.gpu_memory, build_has_gpu=False)
    target, draft, remote = _opened(args.target_path), None, []
    if args.draft_path is not None:
        draft = _opened(args.draft_path)
    remote = [m for m in (target, draft) if m is not None and not isinstance(m, Path)]
    plan = plan_files(_model(target), _model(draft) if draft is not None else None, n_ctx=args.n_ctx,
                      machine=machine, target_gpu_layers=args.gpu_layers, draft_gpu_layers=args.draft_gpu_layers,
                      flash_attention=args.flash_attn)
    note = _note(plan, args.n_ctx, machine)
    extra = _remote_lines(target, draft, remote) if remote else {}
    if args.json:
        out = as_json(plan, note, args)
        out.update(extra.get("json", {}))
        print(json.dumps(out))
    else:
        print(_table(plan, args))
        print(note)
        for line in extra.get("lines", ()):
            print(line)
    return 0 if plan.fits else 1


def _opened(path):
    """A local path as it is; a Hub file's header read over the network (RemoteModel)."""
    if isinstance(path, Path):
        return path
    from app.hub.remote_header import read_remote_model

    return read_remote_model(path)


def _model(opened):
    return opened if isinstance(opened, Path) else opened.model


def _remote_lines(target, draft, remote) -> dict:
    """What a plan of Hub files adds: the download against the free disk, the header
    bytes read, and the pair check (from the two headers)."""
    from app.engine.gguf.meta import pair_verdict
    from app.engine.gguf.model_file import open_model_file
    from app.hub.download import free_disk
    from app.hub.files import size_text as _gb

    size = sum(m.size for m in remote)
    free = free_disk()
    lines = [f"Download: {_gb(size)} ({_gb(sum(m.header_bytes for m in remote))} of headers read); "
             f"free disk for the Hugging Face cache: {_gb(free)}"
             + ("" if size <= free else " - not enough")]
    out: dict = {"download_bytes": size, "free_disk_bytes": free,
                 "header_bytes": sum(m.header_bytes for m in remote)}
    if draft is not None:
        verdict = pair_verdict(open_model_file(_model(target)).metadata, open_model_file(_model(draft)).metadata)
        lines.append(("Pair: " if verdict.ok else "Pair: no - ") + verdict.reason)
        out["compatible"] = verdict.ok
    return {"lines": lines, "json": out}


def _note(plan, n_ctx: int, machine) -> str:
    from app.session.fit import describe, refusal

    if not plan.fits:
        return "Does not fit: " + refusal(plan, n_ctx) + "."
    line = describe(plan)
    if machine.unmeasured_gpu:
        line += " (a GPU without NVML: its memory cannot be read, so llama.cpp offloads every layer)"
    return line[0].upper() + line[1:] + "."


def as_json(plan, note: str, args: argparse.Namespace) -> dict:
    def model(part, path) -> dict | None:
        if part is None:
            return None
        est = part.estimate
        shape = est.shape
        parts = est.parts()
        checkpoints = parts.pop("checkpoints")
        # llama.cpp's layer count, as gpu_layers counts them: the blocks and the output layer.
        return {"path": str(path), "bytes": est.llama_bytes, "parts": parts, "checkpoints": checkpoints,
                "layers": est.n_layers + 1, "blocks": est.n_layers, "gpu_layers": part.gpu_layers if plan.gpu_free else 0,
                "gpu_bytes": part.gpu_bytes if plan.gpu_free else 0,
                "n_ctx": shape.n_ctx, "n_batch": shape.n_batch, "n_ubatch": shape.n_ubatch,
                "n_seq_max": shape.n_seq_max, "n_rs_seq": shape.n_rs_seq, "flash_attn": shape.flash_attn}

    return {"target": model(plan.target, args.target_path), "draft": model(plan.draft, args.draft_path),
            "gpu_bytes": plan.gpu_bytes, "ram_bytes": plan.ram_bytes, "fits": plan.fits, "device": plan.device,
            "gpu_free": plan.gpu_free, "ram_free": plan.ram_free, "smaller_context": plan.smaller_context,
            "note": note}


def _table(plan, args: argparse.Namespace) -> str:
    from app.engine.gguf.header import shown_name
    from app.session.fit import gb

    rows = [("", "file", "layers on GPU (with the head)", "on GPU", "in RAM", "in all")]
    for role, part, path in (("target", plan.target, args.target_path), ("draft", plan.draft, args.draft_path)):
        if part is None:
            continue
        on_gpu = part.gpu_layers if plan.gpu_free else 0
        gpu = part.gpu_bytes if plan.gpu_free else 0
        ram = part.ram_bytes if plan.gpu_free else part.bytes
        layers = f"{on_gpu} of {part.layers + 1}"  # llama.cpp's count: the output head is the last
        name = shown_name(path) if isinstance(path, Path) else path.filename.rsplit("/", 1)[-1]
        rows.append((role, name, layers, gb(gpu), gb(ram), gb(part.bytes)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    where = (f"{plan.device}, {gb(plan.gpu_free)} free" if plan.gpu_free else "no GPU")
    lines.append(f"Context {args.n_ctx:,} tokens · GPU: {where} · system memory: {gb(plan.ram_free)} available")
    return "\n".join(line.rstrip() for line in lines)
