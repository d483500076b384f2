"""The terminal's own commands: ``generate``, ``check-pair`` and ``chat``.

Every expected failure is a ``TandemError`` and ends as one line on stderr (``app.cli.main``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from app.drafter_kinds import DEFAULT as DEFAULT_DRAFTER
from app.drafter_kinds import Needs, needs, runs_as
from app.terminal.prompt_files import read_jsonl, seed_field, text_field
from app.terminal.shared import (
    TerminalProgress,
    UsageError,
    load,
    prompt_tokens,
    sampling_from,
    spec_from,
    summary_line,
)


@dataclass
class PromptJob:
    text: str
    seed: int | None


def _read_prompts(path: Path) -> list[PromptJob]:
    jobs = read_jsonl(path, lambda r: PromptJob(text_field(r["prompt"]), seed_field(r.get("seed"))),
                      error=UsageError,
                      expected='a JSON object with a "prompt" text and an optional whole-number "seed" (-1 or more)')
    if not jobs:
        raise UsageError(f"{path} holds no prompts")
    return jobs


def _token_record(event) -> dict:
    """One token of ``generate --json``; a corrected one also says what the drafter proposed
    there (as the window's hover does)."""
    record = {"id": event.id, "text": event.text, "kind": event.kind.value}
    if event.draft_id is not None:
        record["draft"] = {"id": event.draft_id, "text": event.draft_text}
    return record


def cmd_generate(args: argparse.Namespace) -> int:
    jobs = _read_prompts(args.prompts) if args.prompts else [PromptJob(args.prompt, None)]
    progress = TerminalProgress()
    session = load(args, progress)
    try:
        compatibility = session.compatibility
        if needs(args.drafter) is Needs.DRAFT_FILE and compatibility and not compatibility.ok and not args.no_speculation:
            print(f"tandem: {compatibility.reason}; generating without speculation", file=sys.stderr)
        spec = spec_from(args)
        for job in jobs:
            tokens = prompt_tokens(session.target, job.text, raw=args.raw, system=args.system)
            generation = session.engine.generate(tokens, sampling_from(args, job.seed), spec, args.max_tokens)
            if args.json:
                events = generation.run()
                print(json.dumps({
                    "tokens": [_token_record(e) for e in events],
                    "text": "".join(e.text for e in events),
                    "stats": generation.stats.to_dict(),
                }, ensure_ascii=False), flush=True)
            else:
                for event in generation:
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
                sys.stdout.write("\n")
                print(summary_line(generation.stats), file=sys.stderr)
    finally:
        session.close()
    return 0


def cmd_check_pair(args: argparse.Namespace) -> int:
    """Compatible when the tokenizers agree; with another vocabulary the draft drafts
    through text (said so, with both tokenizers). Either way both files must survive a
    trial load in a child process (remembered per file); a file llama.cpp dies on is a
    one-line error."""
    from app.backends.loader import check_pair
    from app.engine.gguf.header import shown_name
    from app.engine.gguf.model_file import open_model_file

    target, draft = open_model_file(args.target_path), open_model_file(args.draft_path)  # each read once
    result = check_pair(target, draft)
    # The kind the draft runs as, named as the draft model (app/drafter_kinds.py): "eagle3"
    # for an EAGLE-3 drafter file, "model" for a draft model.
    drafter = runs_as(DEFAULT_DRAFTER, draft.metadata.architecture)
    heads = head_notes(target, draft)
    memory = memory_lines(target, draft)
    if args.json:
        # "not_used": the lines about heads Tandem does not use (a subset of "heads", kept for scripts that read it).
        not_used = [line for line in heads if ": not used yet: " in line]
        print(json.dumps({"compatible": result.ok, "drafter": str(drafter), "through_text": result.through_text,
                          "reads_target": result.reads_target, "rule": result.rule,
                          "reason": result.reason, "heads": heads, "not_used": not_used, "memory": memory}))
    else:
        print(result.reason if not result.ok or result.through_text or result.reads_target else
              f"Compatible: {shown_name(args.draft_path)} can draft for {shown_name(args.target_path)}.")
        for line in heads:
            print(line)
        for role, kind in memory.items():
            if kind["note"]:
                print(f"{role.capitalize()} {shown_name(kind['path'])}: {kind['note']}.")
    return 0 if result.ok else 1


def memory_lines(target, draft) -> dict[str, dict[str, str]]:
    """Each file's (a ModelFile) memory kind, and what it means for speculation
    (app/engine/gguf/memory_kinds.py)."""
    from app.engine.gguf.memory_kinds import file_memory_note, memory_kind

    out = {}
    for role, model in (("target", target), ("draft", draft)):
        arch = model.metadata.architecture
        out[role] = {"path": str(model.path), "architecture": arch, "kind": memory_kind(arch),
                     "note": file_memory_note(arch, as_target=role == "target")}
    return out


def head_notes(*files) -> list[str]:
    """One line per kind of head trained to draft that each file (a ModelFile or a path)
    carries: its MTP head drafts (or why it cannot), other heads are not used yet."""
    from app.engine.gguf.draft_heads import head_lines
    from app.engine.gguf.header import shown_name
    from app.engine.gguf.model_file import open_model_file

    return [f"{shown_name(model.path)}: {line}" for model in map(open_model_file, files)
            for line in head_lines(model.metadata.architecture, model.metadata.draft_heads,
                                   model.metadata.mtp_layers, model.metadata.mtp_problem)]


def cmd_chat(args: argparse.Namespace) -> int:
    """A terminal chat: each reply streams with its speculation summary. llama.cpp runs in an
    engine process of its own: if it dies, the chat says so in one line and offers a restart."""
    from app.session.engine_session import EngineDied, EngineSession

    engine = EngineSession()
    history: list[tuple[str, str]] = []
    try:
        info = _load_engine(engine, args, announce=True)
        print(f"Chatting with {info.target_name}" + (f" (draft: {info.draft_name})" if info.draft_name else "")
              + ". Empty line or Ctrl+D quits.", file=sys.stderr)
        while True:
            try:
                text = input("you> ").strip()
            except EOFError:
                break
            if not text:
                break
            history.append(("user", text))
            reply: list[str] = []
            try:
                try:
                    for event in engine.reply(history, sampling_from(args), spec_from(args), args.max_tokens,
                                              system_prompt=args.system):
                        reply.append(event.text)
                        sys.stdout.write(event.text)
                        sys.stdout.flush()
                except KeyboardInterrupt:
                    engine.stop()
                    for event in engine.reply_rest():
                        reply.append(event.text)
            except EngineDied as death:
                history.append(("assistant", "".join(reply)))  # what was shown stays in the chat
                print(f"\ntandem: {death}; the reply was interrupted, the chat is kept.", file=sys.stderr)
                if not _ask("Restart the engine? [Y/n] "):
                    break
                engine.restart()
                _load_engine(engine, args)
                continue
            history.append(("assistant", "".join(reply)))
            if engine.stats is not None:
                print("\n" + summary_line(engine.stats), file=sys.stderr)
    finally:
        engine.close()
    return 0


def _load_engine(engine, args: argparse.Namespace, announce: bool = False):
    """The command line's models in the engine (``announce``: and the chat format's line,
    said once a chat); a death while loading is not retried (the crash-loop guard's rule):
    it ends the command in one line."""
    from app.session.engine_session import EngineDied
    from app.terminal.shared import model_spec, say_chat_format

    progress = TerminalProgress()
    spec = model_spec(args)
    try:
        info = engine.load(spec, progress)
        progress.done()
        if announce:
            say_chat_format(info, spec)
        return info
    except EngineDied as death:
        raise EngineDied(f"{death} while loading the models") from None
    finally:
        progress.done()


def _ask(question: str) -> bool:
    try:
        answer = input(question).strip().lower()
    except EOFError:
        return False
    return answer in ("", "y", "yes")
