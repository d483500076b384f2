"""The self-test's checks: does speculation work, and pay, on this machine?

Generates 64 tokens greedily with and without speculation on the configured
pair (or the demo pair) and reports the backend, acceptance, speed-up and
whether both outputs are identical. Where they differ, it says whether the
first difference is a floating-point near-tie (batched and single-token
arithmetic can round differently) or a real fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.engine.prompting.chat import build_messages, chat_tokens
from app.engine.types import SamplingConfig, SpecConfig

PROMPT = "Explain in a few sentences why the sky is blue."
N_TOKENS = 64
NEAR_TIE = 0.1  # top-2 logit gap under which rounding may flip the argmax


@dataclass
class SelfTestReport:
    backend: str
    gpu: str
    target: str
    draft: str
    compatible: bool
    compatibility: str
    acceptance: float = 0.0
    tokens_per_round: float = 0.0
    plain_tokens_per_second: float = 0.0
    spec_tokens_per_second: float = 0.0
    identical: bool = False
    difference: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.spec_tokens_per_second / self.plain_tokens_per_second if self.plain_tokens_per_second else 0.0

    @property
    def ok(self) -> bool:
        return self.compatible and (self.identical or self.difference.startswith("near-tie"))

    def lines(self) -> list[str]:
        out = [
            f"Backend:        {self.backend}" + (f" ({self.gpu})" if self.gpu else ""),
            f"Target:         {self.target}",
            f"Draft:          {self.draft}",
            f"Compatible:     {'yes' if self.compatible else 'NO - ' + self.compatibility}",
        ]
        if self.compatible:
            out += [
                f"Acceptance:     {self.acceptance:.2f} ({self.tokens_per_round:.2f} tokens per round)",
                f"Speed:          {self.spec_tokens_per_second:.1f} tok/s speculative vs "
                f"{self.plain_tokens_per_second:.1f} tok/s plain = {self.speedup:.2f}x",
                f"Identical:      {'yes' if self.identical else 'no - ' + self.difference}",
            ]
        out += self.notes
        out.append("Result:         " + ("PASS" if self.ok else "FAIL"))
        return out


def run_checks(pair, gpu_name: str = "") -> SelfTestReport:
    from app.backends.llama.process_setup import system_info

    info = system_info()
    compat = pair.compatibility
    report = SelfTestReport(
        backend=info["backend"], gpu=gpu_name, target=pair.target.path.name,
        draft=pair.draft.path.name if pair.draft else "(none)",
        compatible=pair.engine.drafter is not None,
        compatibility=compat.reason if compat and not compat.ok else pair.engine.note)
    if not report.compatible:
        return report
    tokens = chat_tokens(pair.target, build_messages([("user", PROMPT)]))
    greedy = SamplingConfig(temperature=0.0, ignore_eos=True)
    runs = {}
    for mode, spec in (("plain", SpecConfig(enabled=False)), ("spec", SpecConfig(draft_max=5)),
                       ("plain2", SpecConfig(enabled=False))):
        generation = pair.engine.generate(tokens, greedy, spec, N_TOKENS)
        runs[mode] = ([e.id for e in generation], generation.stats)
    plain_ids, plain = runs["plain"]
    spec_ids, spec = runs["spec"]
    report.acceptance = spec.acceptance
    report.tokens_per_round = spec.tokens_per_round
    # Two plain runs bracket the speculative one, so load changes cancel out.
    report.plain_tokens_per_second = (plain.tokens_per_second + runs["plain2"][1].tokens_per_second) / 2
    report.spec_tokens_per_second = spec.tokens_per_second
    report.identical = plain_ids == spec_ids
    if not report.identical:
        report.difference = _explain_difference(pair.target, tokens, plain_ids, spec_ids)
    if report.speedup < 1.0:
        report.notes.append("Note:           speculation is slower than plain decoding here; "
                            "'auto' draft length switches it off when it does not pay.")
    return report


def _explain_difference(target, prompt: list[int], plain: list[int], spec: list[int]) -> str:
    index = next(i for i, (a, b) in enumerate(zip(plain, spec)) if a != b)
    target.trim(0)
    rows = target.evaluate([*prompt, *plain[:index]], [len(prompt) + index - 1])
    row = np.delete(rows[0], list(target.eog_ids))
    top2 = np.partition(row, -2)[-2:]
    gap = float(top2[1] - top2[0])
    if gap < NEAR_TIE:
        return (f"near-tie at token {index} (the top two logits differ by {gap:.3f}; batched "
                "arithmetic rounds differently, not a speculation error)")
    return f"diverged at token {index} with a clear winner (gap {gap:.3f}): please report this"


def gpu_names() -> str:
    """The NVIDIA GPUs NVML sees, for the report ('' without any)."""
    from app.gpu.monitor import GpuMonitor

    monitor = GpuMonitor()
    status = monitor.poll()
    monitor.close()
    return ", ".join(g.name for g in status.gpus) if status.available else ""
