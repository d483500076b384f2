"""``tools/phase_costs.py`` reads a prompt, then times a verification and a step after it,
with the flash attention and batch asked for: a real model, a short prompt."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flash", ["on", "off"])
def test_it_times_each_phase_with_the_context_asked_for(demo_models, flash):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "phase_costs.py"), str(demo_models.draft),
                          "--flash-attn", flash, "--batch", "32", "--prompt-tokens", "80", "--verify", "5",
                          "--repeats", "2", "--n-ctx", "256"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip().splitlines()[-1]
    match = re.search(rf"flash attention {flash}, batch 32, \d+ threads: reading 80 tokens ([\d.]+) s .*"
                      r"verifying 5 tokens ([\d.]+) ms, one step ([\d.]+) ms", line)
    assert match, line
    assert all(float(v) > 0 for v in match.groups())
