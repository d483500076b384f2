"""What ``tandem bench`` measured, as figures: per-category tallies, the ideal speed-up
for the measured acceptance and costs, 95% intervals from resampling the prompts, and
the tables the terminal prints. ``bench/speedup.py`` runs the prompts; this module only
counts and formats, so its arithmetic is tested without a model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.types import Stats

NO_COPY = " nocopy"  # the label suffix of a setting run without copying repeats (--copy both)


@dataclass
class Tally:
    """Sums over the runs of one category (or all of them) for one draft setting."""

    plain_tokens: int = 0
    plain_seconds: float = 0.0
    spec_tokens: int = 0
    spec_seconds: float = 0.0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    rounds: int = 0
    python_seconds: float = 0.0
    plain_steps: int = 0
    plain_step_seconds: float = 0.0   # inside the target's calls, plain runs
    verify_seconds: float = 0.0       # inside the target's calls, speculative runs
    draft_seconds: float = 0.0       # inside the draft model's calls, speculative runs
    draft_host_seconds: float = 0.0   # host work drafting, speculative runs
    verify_host_seconds: float = 0.0  # host work verifying, speculative runs
    copied: int = 0
    copied_accepted: int = 0
    prompts: int = 0

    def add(self, plain: Stats, spec: Stats) -> None:
        self.prompts += 1
        self.plain_tokens += plain.tokens
        self.plain_seconds += plain.seconds
        self.spec_tokens += spec.tokens
        self.spec_seconds += spec.seconds
        self.drafted += spec.drafted
        self.accepted += spec.accepted
        self.rejections += spec.rejections
        self.rounds += spec.rounds
        self.python_seconds += spec.python_seconds + plain.python_seconds
        self.plain_steps += plain.rounds
        self.plain_step_seconds += plain.target_seconds
        self.verify_seconds += spec.target_seconds
        self.draft_seconds += spec.draft_seconds
        self.draft_host_seconds += spec.draft_host_seconds
        self.verify_host_seconds += spec.verify_host_seconds
        self.copied += spec.copied
        self.copied_accepted += spec.copied_accepted

    def report(self) -> dict:
        plain_tps = self.plain_tokens / self.plain_seconds if self.plain_seconds else 0.0
        spec_tps = self.spec_tokens / self.spec_seconds if self.spec_seconds else 0.0
        acceptance = self.accepted / self.drafted if self.drafted else 0.0
        # α for the formula: the per-token acceptance probability (MLE), not accepted/drafted,
        # which also counts drafts after a rejection that were never judged.
        judged = self.accepted + self.rejections
        alpha = self.accepted / judged if judged else 0.0
        k = self.drafted / self.rounds if self.rounds else 0.0  # mean draft length per round
        step = self.plain_step_seconds / self.plain_steps if self.plain_steps else 0.0
        # A draft step as paid, catching up after plain rounds included.
        c = self.draft_seconds / self.drafted / step if self.drafted and step else 0.0
        v = self.verify_seconds / self.rounds / step if self.rounds and step else 1.0
        ideal = ideal_speedup(alpha, k, c, v)
        speedup = spec_tps / plain_tps if plain_tps else 0.0
        host = self.draft_host_seconds + self.verify_host_seconds
        return {
            "prompts": self.prompts,
            "plain_tokens_per_second": round(plain_tps, 3),
            "spec_tokens_per_second": round(spec_tps, 3),
            "speedup": round(speedup, 4),
            "acceptance": round(acceptance, 4),
            "alpha": round(alpha, 4),
            "tokens_per_round": round(self.spec_tokens / self.rounds, 4) if self.rounds else 0.0,
            "mean_draft_length": round(k, 3),
            "c": round(c, 4),
            "v": round(v, 4),
            "ideal_speedup": round(ideal, 4),
            "efficiency": round(speedup / ideal, 4) if ideal else 0.0,
            "copied_share": round(self.copied_accepted / self.spec_tokens, 4) if self.spec_tokens else 0.0,
            "copy_acceptance": round(self.copied_accepted / self.copied, 4) if self.copied else 0.0,
            "python_overhead": round(self.python_seconds / (self.plain_seconds + self.spec_seconds), 4)
            if self.plain_seconds + self.spec_seconds else 0.0,
            # The speculative runs' time four ways: inside llama.cpp (draft, target) and on
            # the host (drafting, verifying); and the host's part per round and per drafted token.
            "seconds_split": {"draft_llama": round(self.draft_seconds, 4),
                              "target_llama": round(self.verify_seconds, 4),
                              "draft_host": round(self.draft_host_seconds, 4),
                              "verify_host": round(self.verify_host_seconds, 4)},
            "host_ms_per_round": round(1000 * host / self.rounds, 4) if self.rounds else 0.0,
            "host_ms_per_drafted": round(1000 * host / self.drafted, 4) if self.drafted else 0.0,
        }


def ideal_speedup(acceptance: float, k: float, c: float, v: float) -> float:
    """Expected tokens per round / cost of a round, in plain steps: (1 - a^(k+1)) / (1 - a) / (k c + v)."""
    if k <= 0:
        return 1.0
    a = min(acceptance, 0.999999)
    tokens_per_round = (1 - a ** (k + 1)) / (1 - a)
    return tokens_per_round / (k * c + v)


def middle_run(runs: list[Stats]) -> Stats:
    """The run in the middle by seconds per token (of two, the faster). Timing noise
    on a desktop is one-sided: load elsewhere only ever slows a run down."""
    ordered = sorted(runs, key=lambda s: s.seconds / max(s.tokens, 1))
    return ordered[(len(ordered) - 1) // 2]


def summarize(prompts: Sequence, runs: list[dict[str, Stats]], settings: list[int | str]) -> dict:
    """Per setting, by category and overall, with intervals and comparisons. ``prompts``:
    the bench's prompts (each with a ``category``), in the order of ``runs``."""
    tallies: dict[str, dict[str, Tally]] = {str(s): defaultdict(Tally) for s in settings}
    for prompt, by_mode in zip(prompts, runs):
        for setting in tallies:
            for key in (prompt.category, "overall"):
                tallies[setting][key].add(by_mode["plain"], by_mode[setting])
    report = {
        setting: {
            "by_category": {cat: t.report() for cat, t in sorted(by_key.items()) if cat != "overall"},
            "overall": by_key["overall"].report(),
        }
        for setting, by_key in tallies.items()
    }
    intervals = Resampled(runs)
    for setting in tallies:
        report[setting]["overall"]["speedup_ci"] = intervals.speedup(setting)
    for suffix in ("", NO_COPY):
        # auto against each fixed length, both copying or both not
        fixed = [s for s in report if s.endswith(suffix) and s.removesuffix(suffix).isdigit()]
        if "auto" + suffix in report and fixed:
            report["auto" + suffix]["vs_fixed"] = {s: intervals.ratio("auto" + suffix, s) for s in fixed}
    for setting in report:
        if setting + NO_COPY in report:
            report[setting]["vs_no_copy"] = intervals.ratio(setting, setting + NO_COPY)
    return report


class Resampled:
    """95% intervals from resampling prompts with replacement (the bootstrap): how
    much a figure would move on another draw of prompts like these, run as noisily.
    Every setting sees the same draws, so comparisons between settings are paired."""

    DRAWS = 2000

    def __init__(self, runs: list[dict[str, Stats]], seed: int = 0) -> None:
        draws = np.random.default_rng(seed).integers(0, len(runs), size=(self.DRAWS, len(runs)))
        self._rate: dict[str, float] = {}            # tokens per second over every prompt
        self._drawn_rates: dict[str, np.ndarray] = {}  # ... over each draw of prompts
        for mode in runs[0]:  # every prompt ran every mode
            tokens = np.array([r[mode].tokens for r in runs], dtype=float)
            seconds = np.array([r[mode].seconds for r in runs], dtype=float)
            self._rate[mode] = float(tokens.sum() / seconds.sum())
            self._drawn_rates[mode] = tokens[draws].sum(axis=1) / seconds[draws].sum(axis=1)

    def speedup(self, setting: str) -> list[float]:
        return _interval(self._drawn_rates[setting] / self._drawn_rates["plain"])

    def ratio(self, setting: str, other: str) -> dict:
        """``setting``'s speed-up over ``other``'s, measured and its interval (the plain
        baseline is the same runs for both, so it cancels)."""
        return {"ratio": round(self._rate[setting] / self._rate[other], 4),
                "ci": _interval(self._drawn_rates[setting] / self._drawn_rates[other])}


def _interval(draws: np.ndarray) -> list[float]:
    low, high = np.percentile(draws, [2.5, 97.5])
    return [round(float(low), 4), round(float(high), 4)]


def format_table(report: dict) -> str:
    width = max(6, *map(len, report))
    header = (f"{'draft':>{width}} {'category':<15} {'plain t/s':>9} {'spec t/s':>9} {'speedup':>8} "
              f"{'accept':>7} {'tok/rnd':>7} {'ideal':>6} {'effic':>6} {'py ovh':>6}")
    lines = [header, "-" * len(header)]
    for setting, result in report.items():
        rows = list(result["by_category"].items()) + [("OVERALL", result["overall"])]
        for cat, r in rows:
            lines.append(f"{setting:>{width}} {cat:<15} {r['plain_tokens_per_second']:>9.1f} "
                         f"{r['spec_tokens_per_second']:>9.1f} {r['speedup']:>7.2f}x {r['acceptance']:>7.2f} "
                         f"{r['tokens_per_round']:>7.2f} {r['ideal_speedup']:>5.2f}x {r['efficiency']:>6.2f} "
                         f"{r['python_overhead'] * 100:>5.1f}%")
        overall = result["overall"]
        low, high = overall["speedup_ci"]
        lines.append(f"{'':>{width}} speed-up 95% interval over prompts: {low:.2f}x - {high:.2f}x")
        if overall["copied_share"]:
            lines.append(f"{'':>{width}} copied: {overall['copied_share']:.0%} of the tokens (repeats, "
                         f"no draft steps), {overall['copy_acceptance']:.2f} of copied tokens accepted")
        lines.append(f"{'':>{width}} measured costs: c = {overall['c']:.3f} (draft step / target step), "
                     f"v = {overall['v']:.3f} (verify k+1 / target step)")
        split = overall["seconds_split"]
        lines.append(f"{'':>{width}} time: llama.cpp draft {split['draft_llama']:.2f} s, target "
                     f"{split['target_llama']:.2f} s; host drafting {split['draft_host']:.2f} s, verifying "
                     f"{split['verify_host']:.2f} s: host {overall['host_ms_per_round']:.2f} ms a round, "
                     f"{overall['host_ms_per_drafted']:.2f} ms a drafted token")
    for setting, result in report.items():
        comparisons = list(result.get("vs_fixed", {}).items())
        if "vs_no_copy" in result:
            comparisons.append((setting + NO_COPY, result["vs_no_copy"]))
        for other, compared in comparisons:
            low, high = compared["ci"]
            lines.append(f"draft_max={setting} vs draft_max={other}: {compared['ratio']:.3f}x "
                         f"(95% interval {low:.3f}x - {high:.3f}x)")
    return "\n".join(lines)


def busy_comparison(quiet: dict, busy: dict) -> dict:
    """Per setting, overall plain and speculative tokens/s quiet and busy, and busy / quiet."""
    compared = {}
    for setting in quiet:
        q, b = quiet[setting]["overall"], busy[setting]["overall"]
        row = {}
        for mode in ("plain", "spec"):
            key = f"{mode}_tokens_per_second"
            row[f"{mode}_quiet"], row[f"{mode}_busy"] = q[key], b[key]
            row[f"{mode}_ratio"] = round(b[key] / q[key], 4) if q[key] else 0.0
        compared[setting] = row
    return compared


def format_busy(compared: dict, n: int) -> str:
    lines = [f"quiet vs {n} busy-loop process{'es' if n > 1 else ''} (tokens/s, overall):",
             f"{'draft':>8} {'plain quiet':>11} {'plain busy':>10} {'ratio':>6} "
             f"{'spec quiet':>10} {'spec busy':>9} {'ratio':>6}"]
    for setting, r in compared.items():
        lines.append(f"{setting:>8} {r['plain_quiet']:>11.1f} {r['plain_busy']:>10.1f} {r['plain_ratio']:>6.2f} "
                     f"{r['spec_quiet']:>10.1f} {r['spec_busy']:>9.1f} {r['spec_ratio']:>6.2f}")
    return "\n".join(lines)
