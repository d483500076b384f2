"""``tandem bench``: speculative vs plain decoding, measured in one run on the same models.

Spec-Bench's protocol (batch size 1, speed-up = mean tokens/s with speculation / mean
tokens/s without, per category), sampled with the app's settings unless ``--temperature
0`` asks for greedy, as Spec-Bench measures. Plain and speculative runs
alternate their order prompt by prompt so drift in machine load hits both alike.
Each prompt runs ``--repeat N`` times (3 unless told) in every setting and its middle run
counts (a moment of load elsewhere slows one run, not all of them); the overall
speed-up carries a 95% interval from resampling the prompts, and auto is set
against each fixed length prompt by prompt, so "auto beats 8" can be told from
noise. ``--busy N`` runs everything twice, on the machine as it is and then with N
busy-loop processes of its own (``bench/busy.py``), and sets the two side by side.
``--workload edit`` runs the edit requests shipped with Tandem (fix, rename, rewrite,
translate back, over pasted code and text) instead of the default prompts;
``--workload regenerate`` presses Regenerate on each prompt (the default ones, or
``--prompts``): the reply being replaced (the target's own greedy reply, made once
before the timed runs) is a copy source of every run, as ``ChatSession.reply(replaced=...)``
makes it in the app;
``--workload agent`` replays multi-turn editing sessions through the HTTP API
(``bench/agent.py``).
``--copy both`` runs every setting with and without copying repeats
(``SpecConfig.copy_min``) and sets the two against each other the same way.
Next to the measured speed-up stands the ideal for the measured acceptance α,
draft length k and cost ratios c (draft step / target step) and v (verifying k+1
tokens / target step), as docs/ARCHITECTURE.md ("The speculative round") derives
it; efficiency = measured / ideal. The costs are
means over the very calls the run made (plain target steps from the plain runs),
so a moment of machine load weighs on the ideal as on the measurement, and what
efficiency leaves out is time outside llama.cpp and the gap between real and
i.i.d. acceptance. What a run measured becomes figures, intervals and tables in
``bench/report.py``; this module chooses the prompts and settings and runs them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from app.bench.report import NO_COPY, busy_comparison, format_busy, format_table, middle_run, summarize
from app.terminal.arg_types import regular_file, setting_value, whole
from app.terminal.shared import add_sampler_arguments
from app.storage.settings import number_range
from app.errors import TandemError
from app.terminal.prompt_files import read_jsonl, text_field
from app.engine.speculation.draft_policy import draft_policy
from app.engine.types import COPY_MIN, DrafterKind, SamplingConfig, SpecConfig, Stats

DEFAULT_REPEAT = 3  # runs per prompt and setting when --repeat is not given
# Two prompts per Spec-Bench category, written for Tandem and shipped in the package, so the
# bench runs from a pip install or the bundle; --prompts takes Spec-Bench's own files.
DEFAULT_PROMPTS = Path(__file__).resolve().parents[1] / "resources" / "bench_prompts.jsonl"
# Requests that rework what they quote, where copying pays most (``--workload edit``).
EDIT_WORKLOAD = Path(__file__).resolve().parents[1] / "resources" / "edit_workload.jsonl"
# Multi-turn editing sessions, replayed through the HTTP API (``--workload agent``, bench/agent.py).
AGENT_SESSIONS = Path(__file__).resolve().parents[1] / "resources" / "agent_sessions.jsonl"
WORKLOADS = {"default": DEFAULT_PROMPTS, "edit": EDIT_WORKLOAD, "agent": AGENT_SESSIONS,
             "regenerate": DEFAULT_PROMPTS}


class BenchError(TandemError):
    pass


@dataclass
class BenchPrompt:
    category: str
    text: str


def read_prompts(path: Path, limit: int | None, categories: set[str] | None) -> list[BenchPrompt]:
    def parse(record: dict) -> BenchPrompt:
        text = record["turns"][0] if "turns" in record else record["prompt"]
        return BenchPrompt(text_field(record.get("category", "all")), text_field(text))

    prompts = [p for p in read_jsonl(path, parse, error=BenchError, expected='Spec-Bench "turns" or a "prompt"')
               if categories is None or p.category in categories]
    if limit:
        # Keep every category represented: take prompts round-robin across them.
        by_cat: dict[str, list[BenchPrompt]] = defaultdict(list)
        for p in prompts:
            by_cat[p.category].append(p)
        picked: list[BenchPrompt] = []
        while len(picked) < limit and any(by_cat.values()):
            for cat in list(by_cat):
                if by_cat[cat] and len(picked) < limit:
                    picked.append(by_cat[cat].pop(0))
        prompts = picked
    if not prompts:
        raise BenchError(f"{path} holds no prompts to run")
    return prompts


def add_parser(commands, add_model_arguments) -> None:
    bench = commands.add_parser("bench", help="measure speculative vs plain decoding")
    bench.add_argument("--prompts", type=regular_file, default=None,
                       help="Spec-Bench JSONL (question_id, category, turns) or {\"prompt\"} lines "
                            "(default: the workload's prompts)")
    bench.add_argument("--workload", choices=sorted(WORKLOADS), default="default",
                       help="prompts shipped with Tandem: default (26, two per Spec-Bench category), "
                            "edit (fix, rename, rewrite and translate requests over pasted code and text), "
                            "regenerate (the default prompts' replies regenerated, the replaced reply a copy "
                            "source) or "
                            "agent (5 multi-turn editing sessions replayed through the HTTP API, each turn "
                            "resending the history; --limit: sessions)")
    bench.add_argument("--turns", type=whole(1, what="a number of turns"), default=4,
                       help="agent: most turns per session (default: %(default)s)")
    bench.add_argument("--url", default=None, metavar="URL",
                       help="agent: replay against a server already running at this /v1 address "
                            "(default: start one in this process on the bench's models)")
    bench.add_argument("--busy", type=whole(0, 64, what="a number of processes"), default=0, metavar="N",
                       help="also run with N busy-loop processes of the bench's own and report quiet "
                            "and busy figures side by side (default: 0, as the machine is)")
    bench.add_argument("--limit", type=whole(1), default=None,
                       help="at most this many prompts, spread over categories (default: all)")
    bench.add_argument("--categories", default=None, help="comma-separated categories to run (default: all)")
    bench.add_argument("--max-tokens", "-n", "--n-predict", type=setting_value("max_tokens"), default=128,
                       help="tokens generated per prompt (default: %(default)s)")
    bench.add_argument("--draft-max", default="auto", type=draft_max_list,
                       help="N, a list like 1,3,5, or auto (default: auto)")
    bench.add_argument("--repeat", type=whole(1, what="a number of runs"), default=None,
                       help="runs per prompt and setting; the median one counts, so a moment of load "
                            f"elsewhere does not make a category look slower (default: {DEFAULT_REPEAT})")
    bench.add_argument("--copy", choices=["on", "off", "both"], default="on",
                       help="copy repeated text instead of drafting it (default: on, as in the app); "
                            "both: every setting runs with and without (\"8\" and \"8 nocopy\")")
    bench.add_argument("--tree", default="auto", metavar="auto|on|off[,...]",
                       help="token trees (SpecConfig.tree): auto (as in the app), on, off (lines only); a list "
                            "like off,on runs each, the later ones labelled \"auto tree=on\" (default: auto)")
    from app.bench import methods as bench_methods

    sampled = bench.add_argument_group("sampling (default: the app's settings; --temperature 0 measures greedy)")
    add_sampler_arguments(sampled)
    sampled.add_argument("--seed", type=whole(0, number_range("seed").high), metavar="N", default=0,
                         help="random seed, the same for every run so that runs repeat (default: %(default)s)")
    bench_methods.add_arguments(bench)
    bench.add_argument("--json", action="store_true", help="print the report as one JSON object")
    bench.add_argument("--chart", type=Path, help="write a PNG chart of speed-up and acceptance per category (default: no chart)")
    add_model_arguments(bench)


def _draft_settings(value: str) -> list[int | str]:
    """``--draft-max``: 'auto', N, or a list like 1,3,5; each N in the setting's declared range."""
    from app.vocabulary import DRAFT_MAX_RANGE

    low, high = DRAFT_MAX_RANGE
    settings: list[int | str] = []
    for part in value.split(","):
        part = part.strip()
        if part == "auto":
            settings.append("auto")
        elif part.isdigit() and low <= int(part) <= high:
            settings.append(int(part))
        else:
            raise BenchError(f"--draft-max: {part!r} is not a number from {low} to {high} or 'auto'")
    return settings


def draft_max_list(value: str) -> str:
    """The parser's check of ``--draft-max`` (what ``_draft_settings`` takes), so a wrong
    value is a usage error before anything loads."""
    try:
        _draft_settings(value)
    except BenchError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--draft-max: ")) from None
    return value


def bench_specs(draft_settings: list[int | str], copy: str = "on", trees: Sequence[str] = ("auto",)) -> dict[str, SpecConfig]:
    """A label per setting to run: "8", "auto"; with ``copy="both"`` also "8 nocopy";
    with more than one of ``trees`` (SpecConfig.tree), the later ones as "auto tree=on"."""
    specs: dict[str, SpecConfig] = {}
    for tree in trees:
        suffix = f" tree={tree}" if tree != trees[0] else ""
        for setting in draft_settings:
            if copy in ("on", "both"):
                specs[str(setting) + suffix] = SpecConfig(draft_max=setting, copy_min=COPY_MIN, tree=tree)
            if copy in ("off", "both"):
                specs[str(setting) + (NO_COPY if copy == "both" else "") + suffix] = SpecConfig(
                    draft_max=setting, tree=tree)
    return specs


def _tree_settings(value: str) -> list[str]:
    trees = [part.strip() for part in value.split(",")]
    for tree in trees:
        if tree not in ("auto", "on", "off"):
            raise BenchError(f"--tree: {tree!r} is not auto, on or off")
    return trees


def run_bench(engine, target, prompts: list[BenchPrompt], draft_settings: list[int | str],
              max_tokens: int, progress=None, repeat: int = 1, copy: str = "on",
              trees: Sequence[str] = ("auto",), regenerate: bool = False,
              sampling: SamplingConfig = SamplingConfig(temperature=0.0)) -> dict:
    """Each prompt runs ``repeat`` times plainly and in every draft setting, in an
    order that rotates from run to run, so drift in machine load hits every
    setting alike; the plain run is every setting's baseline for that prompt.
    ``regenerate``: each run replaces a reply (see ``measure``)."""
    specs = bench_specs(draft_settings, copy, trees)
    runs = measure(engine, target, prompts, specs, max_tokens, progress, repeat, regenerate, sampling)
    return summarize(prompts, runs, list(specs))


def measure(engine, target, prompts: list[BenchPrompt], settings: dict[str, SpecConfig],
            max_tokens: int, progress=None, repeat: int = 1, regenerate: bool = False,
            sampling: SamplingConfig = SamplingConfig(temperature=0.0)) -> list[dict[str, Stats]]:
    """Per prompt, the middle run (see ``middle_run``) of each mode: "plain" and each setting.
    ``regenerate``: the prompt's greedy reply is made first, untimed, and every run is its
    regeneration, with it as a copy source (plain decoding copies nothing, so it is the
    same run either way). ``sampling``: how every run decodes (greedy by default; the CLI
    defaults to the app's settings)."""
    from app.engine.prompting.chat import build_messages, chat_tokens

    modes: list[str] = ["plain", *settings]
    specs = {"plain": SpecConfig(enabled=False), **settings}
    # One policy per setting, so one auto setting's measurements (and choices) do not
    # colour another's, nor the engine's own.
    policies = {mode: draft_policy(spec) for mode, spec in specs.items()}
    total = len(prompts) * len(modes) * repeat
    done = 0
    picked: list[dict[str, Stats]] = []
    for index, prompt in enumerate(prompts):
        tokens = chat_tokens(target, build_messages([("user", prompt.text)]))
        replaced = [replaced_reply(engine, tokens, max_tokens)] if regenerate else None
        runs: dict[str, list[Stats]] = defaultdict(list)
        for attempt in range(repeat):
            shift = (index * repeat + attempt) % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                generation = engine.generate(tokens, sampling, specs[mode], max_tokens, policy=policies[mode],
                                             copy_sources=replaced)
                generation.run()
                runs[mode].append(generation.stats)
                done += 1
                if progress:
                    name = "plain" if mode == "plain" else "draft_max=" + mode
                    progress(f"bench {index + 1}/{len(prompts)} {name}", done, total)
        picked.append({mode: middle_run(stats) for mode, stats in runs.items()})
    return picked


def replaced_reply(engine, prompt: list[int], max_tokens: int) -> list[int]:
    """The reply a regeneration replaces: the target's own greedy reply, plainly decoded,
    as the session would copy from it (its text tokenized again, ``ChatSession.remember``)."""
    generation = engine.generate(prompt, SamplingConfig(temperature=0.0), SpecConfig(enabled=False), max_tokens)
    text = "".join(event.text for event in generation.run())
    return engine.target.tokenize(text, add_special=False, parse_special=False)


def bench_sampling(args: argparse.Namespace) -> SamplingConfig:
    return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          min_p=args.min_p, seed=args.seed)


def describe_sampling(sampling: SamplingConfig) -> str:
    if sampling.greedy:
        return "greedy"
    return (f"T {sampling.temperature:g}, top-k {sampling.top_k}, top-p {sampling.top_p:g}, "
            f"min-p {sampling.min_p:g}, seed {sampling.seed}")


def prompts_path(args: argparse.Namespace) -> Path:
    """``--prompts`` or the ``--workload``'s file; both at once is a contradiction, except
    for ``regenerate``, which regenerates any prompts' replies."""
    if args.prompts is not None and args.workload not in ("default", "regenerate"):
        raise BenchError("--prompts and --workload name two prompt sets; give one of them")
    return args.prompts or WORKLOADS[args.workload]


def _threads_now(session) -> dict:
    """The thread counts each model ends the run with (adaptive ones may have moved)."""
    counts = {"target": getattr(session.target, "threads", None)}
    draft = getattr(session.pair, "draft", None)
    if draft is not None:
        counts["draft"] = getattr(draft, "threads", None)
    return counts


def _lookahead_verdict(drafter) -> dict | None:
    """What lookahead's policy concluded over the run (None: another kind drafted)."""
    if drafter.kind != DrafterKind.LOOKAHEAD:
        return None
    policy = drafter.policy
    on, off = policy.rates(None)
    note = policy.note or (f"its window paid here ({on:.1f} tokens/s with it), kept" if on else "its window never rode")
    return {"note": note, "window_off": policy.off, "tokens_per_second_with_window": round(on, 2),
            "tokens_per_second_without": None if off is None else round(off, 2), "pool_ngrams": len(drafter.pool)}


def _bridge_verdict(drafter, compatibility) -> dict | None:
    """What drafting through text cost and concluded over the run (None: nothing drafted
    through text). A draft model whose pair check says "through text" drafts through a
    ``TextBridge`` (app/backends/drafter_factories.py)."""
    if drafter.kind != DrafterKind.MODEL or compatibility is None or not compatibility.through_text:
        return None
    s = drafter.stats
    note = drafter.policy.note or f"drafted through text (policy {drafter.policy.mode}), kept on"
    return {"note": note, "off": drafter.policy.off, "rounds": s.rounds, "no_proposal": s.no_proposal,
            "fed_tokens": s.fed_tokens, "tokenize_seconds": round(s.tokenize_seconds, 4)}


def cmd_bench(args: argparse.Namespace) -> int:
    from app.bench.busy import busy_cores
    from app.terminal.shared import TerminalProgress, load

    if args.workload == "agent":
        from app.bench.agent import cmd_agent_bench

        return cmd_agent_bench(args, _draft_settings(args.draft_max))
    if args.url:
        raise BenchError("--url applies to --workload agent only: the other workloads run the models here")
    if args.repeat is None:
        args.repeat = DEFAULT_REPEAT
    categories = set(args.categories.split(",")) if args.categories else None
    prompts = read_prompts(prompts_path(args), args.limit, categories)
    settings = _draft_settings(args.draft_max)
    progress = TerminalProgress()
    from app.bench import methods as bench_methods

    method = bench_methods.prepare(args, progress)  # chain / tree set --tree
    print(f"method {method}", file=sys.stderr)
    trees = _tree_settings(args.tree)
    session = load(args, progress)
    busy = threads = None
    try:
        if session.engine.drafter is None:
            raise BenchError(f"Nothing to compare: {session.engine.note}")
        regenerate = args.workload == "regenerate"
        sampling = bench_sampling(args)
        print(f"sampling {describe_sampling(sampling)}", file=sys.stderr)
        report = run_bench(session.engine, session.target, prompts, settings, args.max_tokens, progress,
                           args.repeat, args.copy, trees, regenerate, sampling)
        if args.busy:
            threads = {"quiet": _threads_now(session)}
            with busy_cores(args.busy):
                busy = run_bench(session.engine, session.target, prompts, settings, args.max_tokens, progress,
                                 args.repeat, args.copy, trees, regenerate, sampling)
            threads["busy"] = _threads_now(session)
        progress.done()
        window = _lookahead_verdict(session.engine.drafter)
        bridge = _bridge_verdict(session.engine.drafter, session.compatibility)
    finally:
        session.close()
    if window is not None:
        print(f"lookahead: {window['note']}", file=sys.stderr)
    if bridge is not None:
        print(f"text: {bridge['note']} ({bridge['rounds']} rounds through text, "
              f"{bridge['tokenize_seconds']:.2f} s re-tokenizing)", file=sys.stderr)
    if args.json:
        single = next(iter(report.values())) if len(report) == 1 else {"by_draft_max": report}
        single = {"method": args.method, "sampling": describe_sampling(sampling), **single}
        if window is not None:
            single["lookahead"] = window
        if bridge is not None:
            single["text_bridge"] = bridge
        if busy is not None:
            single = {"busy_processes": args.busy, "quiet": single,
                      "busy": next(iter(busy.values())) if len(busy) == 1 else {"by_draft_max": busy},
                      "busy_vs_quiet": busy_comparison(report, busy), "threads": threads}
        print(json.dumps(single))
    else:
        print(format_table(report))
        if busy is not None:
            print(f"\nwith {args.busy} busy-loop process{'es' if args.busy > 1 else ''}:")
            print(format_table(busy))
            print()
            print(format_busy(busy_comparison(report, busy), args.busy))
            print("threads at the end: " + "; ".join(
                f"{phase} " + ", ".join(f"{model} {n}" for model, n in counts.items())
                for phase, counts in threads.items()))
    if args.chart:
        from app.bench.chart import save_chart

        save_chart(report, args.chart)
        print(f"chart written to {args.chart}", file=sys.stderr)
    return 0
