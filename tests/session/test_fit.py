"""Will it fit (app/session/fit.py, app/engine/gguf/memory_plan.py): plans under GPU
budgets given in bytes (a GPU this machine lacks, planned for as ``--gpu-memory`` does),
the NVML-absent path as it is here, and the loads that follow a plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.gguf.memory_plan import AUTO, MARGIN_MOST, margin, plan_pair
from app.session.fit import (FitError, Machine, describe, estimate_for, gpu_layers_for_load, parse_size,
                             plan_files, read_machine, refusal)

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30
RAM = 64 * GiB


def _plan(target, draft, gpu_free: int, **options):
    return plan_files(target, draft, n_ctx=4096, machine=Machine("test GPU", gpu_free, RAM), **options)


def _total(gemma_files) -> int:
    f16, q4 = gemma_files
    from app.engine.gguf.model_file import open_model_file

    return (estimate_for(open_model_file(f16), 4096, draft=False).bytes
            + estimate_for(open_model_file(q4), 4096, draft=True).bytes)


def test_a_budget_of_half_again_their_total_puts_both_models_wholly_on_the_gpu(gemma_files):
    f16, q4 = gemma_files
    plan = _plan(f16, q4, int(1.5 * _total(gemma_files)))
    assert plan.fits and plan.target.whole and plan.draft.whole
    assert plan.target.gpu_layers == plan.target.layers + 1  # every layer and the head
    assert plan.gpu_bytes <= plan.gpu_free - margin(plan.gpu_free)
    assert describe(plan).startswith("fits on the GPU: ")


def test_the_draft_plus_half_the_target_puts_the_draft_wholly_on_it_and_splits_the_target(gemma_files):
    f16, q4 = gemma_files
    from app.engine.gguf.model_file import open_model_file

    target = estimate_for(open_model_file(f16), 4096, draft=False)
    draft = estimate_for(open_model_file(q4), 4096, draft=True)
    budget = draft.bytes + target.bytes // 2
    plan = _plan(f16, q4, budget)
    assert plan.fits and plan.draft.whole
    assert 0 < plan.target.gpu_layers <= plan.target.layers  # the head, its logits the dearest part, stays
    assert plan.gpu_bytes <= budget
    assert f"{plan.target.gpu_layers} of {plan.target.layers + 1} target layers on the GPU" in describe(plan)
    # One more target layer would not have fitted beside the margin
    assert plan.gpu_bytes - plan.target.gpu_bytes + target.gpu_bytes(plan.target.gpu_layers + 1) > \
        budget - margin(budget)


def test_16_mib_plans_no_gpu_layers_and_says_the_pair_runs_on_the_cpu(gemma_files):
    f16, q4 = gemma_files
    plan = _plan(f16, q4, 16 << 20)
    assert plan.fits and plan.target.gpu_layers == plan.draft.gpu_layers == 0 and plan.gpu_bytes == 0
    assert describe(plan).startswith("runs on the CPU")


def test_a_number_of_layers_is_kept_and_minus_one_is_all(demo_models):
    plan = _plan(demo_models.target, demo_models.draft, 64 * GiB, target_gpu_layers=3, draft_gpu_layers=-1)
    assert plan.target.gpu_layers == 3 and plan.target.asked == 3
    assert plan.draft.whole and plan.draft.asked == -1
    assert gpu_layers_for_load(plan.target, 3, Machine("GPU", GiB, RAM)) == 3


def test_a_pair_that_fits_nowhere_is_refused_with_the_context_that_would_fit(demo_models):
    machine = Machine("CPU", 0, 4 * GiB)
    plan = plan_files(demo_models.target, demo_models.draft, n_ctx=1 << 20, machine=machine)
    assert not plan.fits and plan.smaller_context and plan.smaller_context < 1 << 20
    assert plan_files(demo_models.target, demo_models.draft, n_ctx=plan.smaller_context, machine=machine).fits
    line = refusal(plan, 1 << 20)
    assert "\n" not in line and "1,048,576-token context" in line and f"{plan.smaller_context:,}-token" in line


def test_the_margin_is_a_tenth_of_the_free_memory_and_at_most_a_gibibyte():
    assert margin(2 * GiB) == int(0.2 * GiB) and margin(80 * GiB) == MARGIN_MOST


def test_without_nvml_there_is_no_gpu_to_plan_for_and_auto_means_the_cpu(monkeypatch):
    """The real absent path of this machine: no NVIDIA driver, so no layers offloaded
    (unless llama.cpp was built for a GPU NVML cannot see: then all, its own default)."""
    monkeypatch.delenv("TANDEM_GPU_MEMORY", raising=False)
    machine = read_machine()
    assert machine.device == "CPU" and machine.gpu_free == 0 and machine.ram_free > 0
    assert gpu_layers_for_load(None, AUTO, machine) == 0
    assert gpu_layers_for_load(None, AUTO, read_machine(build_has_gpu=True)) == -1


def test_nvml_gives_the_free_memory_of_each_gpu():
    """A fake NVML: the one thing this machine cannot have (the real absent path is above)."""
    from gpu.fake_nvml import FakeGpu, FakeNvml

    nvml = FakeNvml([FakeGpu("NVIDIA GeForce RTX 4070", used=1 * GiB, total=12 * GiB),
                     FakeGpu("NVIDIA GeForce RTX 3060", used=2 * GiB, total=12 * GiB)])
    machine = read_machine(nvml=nvml)
    assert machine.gpu_free == 21 * GiB and machine.device == "NVIDIA GeForce RTX 4070 and 1 more"


def test_a_simulated_gpu_from_the_environment(monkeypatch):
    monkeypatch.setenv("TANDEM_GPU_MEMORY", "6GiB")
    assert read_machine().gpu_free == 6 * GiB and read_machine().device == "simulated GPU"
    monkeypatch.setenv("TANDEM_GPU_MEMORY", "lots")  # ignored, not fatal
    assert read_machine().device == "CPU"


@pytest.mark.parametrize(("text", "size"), [("8GiB", 8 * GiB), ("8g", 8 * GiB), ("512 MiB", 512 << 20),
                                             ("1.5G", int(1.5 * GiB)), ("1000", 1000), ("0", 0)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "eight", "-1G", "8 GB of it", "1e9", "9" * 40])
def test_sizes_that_are_not(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_plan_pair_is_pure_arithmetic_on_estimates(demo_models):
    from app.engine.gguf.model_file import open_model_file

    target = estimate_for(open_model_file(demo_models.target), 4096, draft=False)
    plan = plan_pair(target, None, gpu_free=0, ram_free=RAM)
    assert plan.fits and plan.device == "CPU" and plan.ram_bytes == target.bytes and plan.draft is None


# -- loads that follow the plan -------------------------------------------------------------

def _spec(demo_models, **changes):
    from app.session.config import ModelSpec

    values = dict(target_path=str(demo_models.target), draft_path=str(demo_models.draft), n_ctx=1024)
    values.update(changes)
    return ModelSpec(**values)


def test_a_load_with_auto_gpu_layers_and_no_gpu(demo_models, monkeypatch):
    from app.session.loading import load_session

    monkeypatch.delenv("TANDEM_GPU_MEMORY", raising=False)
    session = load_session(_spec(demo_models))
    try:
        info = session.info
        assert info.gpu_layers == (0, 0) and info.memory_plan.startswith("runs on the CPU")
        assert abs(info.allocated_bytes - info.planned_bytes) < 0.15 * info.allocated_bytes
    finally:
        session.close()


def test_a_load_with_auto_gpu_layers_on_a_simulated_gpu(demo_models, monkeypatch):
    """llama.cpp built for the CPU runs the planned layers here all the same."""
    from app.session.loading import load_session

    monkeypatch.setenv("TANDEM_GPU_MEMORY", "600MiB")
    session = load_session(_spec(demo_models))
    try:
        info = session.info
        target_layers, draft_layers = info.gpu_layers
        assert draft_layers == 31 and 0 < target_layers <= 30  # the draft wholly, the target split
        assert "target layers on the GPU; the draft wholly" in info.memory_plan
        assert 0 < info.planned_gpu_bytes <= 600 << 20
    finally:
        session.close()


def test_a_pair_too_big_for_this_machine_is_refused_before_loading(demo_models):
    from app.session.loading import load_session

    with pytest.raises(FitError, match=r"needs .* at a 16,777,216-token context.*it would fit at a"):
        load_session(_spec(demo_models, n_ctx=1 << 24))


# -- tandem fit ---------------------------------------------------------------------------

def _tandem(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_fit_json_has_what_a_load_would_create(demo_models):
    result = _tandem("fit", str(demo_models.target), str(demo_models.draft), "--ctx", "8192",
                     "--gpu-memory", "700MiB", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    for role in ("target", "draft"):
        model = plan[role]
        assert {"bytes", "parts", "layers", "gpu_layers", "n_ctx", "n_batch", "n_ubatch", "n_rs_seq"} <= set(model)
        assert model["n_ctx"] == 8192 and model["n_batch"] == model["n_ubatch"] == 512
        assert (model["layers"], model["blocks"]) == (31, 30)  # "31 of 31" one way: gpu_layers counts the output too
        assert model["bytes"] == sum(model["parts"].values())
    assert plan["draft"]["gpu_layers"] == plan["draft"]["layers"] == 31 and 0 < plan["target"]["gpu_layers"] <= 30
    assert plan["fits"] is True and plan["device"] == "simulated GPU"
    assert plan["gpu_bytes"] == plan["target"]["gpu_bytes"] + plan["draft"]["gpu_bytes"] <= 700 << 20
    assert "target layers on the GPU" in plan["note"] and "\n" not in plan["note"]


def test_fit_says_it_in_a_table_and_exits_1_when_it_does_not_fit(demo_models, tmp_path):
    result = _tandem("fit", str(demo_models.target), "--gpu-memory", "16MiB")
    assert result.returncode == 0 and "Runs on the CPU: not one layer fits" in result.stdout
    assert result.stdout.splitlines()[1].startswith("target  SmolLM2-135M-Instruct.F32.gguf")
    result = _tandem("fit", str(demo_models.target), "--ctx", str(1 << 24), "--gpu-memory", "0")
    assert result.returncode == 1 and "Does not fit: the model needs" in result.stdout
    result = _tandem("fit", str(demo_models.target), "--gpu-memory", "lots")
    assert result.returncode == 2 and "'lots' is not a size" in result.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 60)
    result = _tandem("fit", str(bad))
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr and "bad.gguf" in result.stderr


def test_a_split_model_counts_every_part(tmp_path, demo_models):
    """llama.cpp loads name-00002-of-00002.gguf beside the first part: its weights count
    (a part missing is one line, as the load would say)."""
    from recurrent_models import write_split_part

    from app.engine.gguf.model_file import open_model_file

    first = tmp_path / "m-00001-of-00002.gguf"
    write_split_part(first, [("blk.0.ffn_up.weight", 1000)], vocab_from=demo_models.draft)
    with pytest.raises(Exception, match="m-00002-of-00002.gguf"):
        estimate_for(open_model_file(first), 1024, draft=False)
    write_split_part(tmp_path / "m-00002-of-00002.gguf", [("blk.1.ffn_up.weight", 3000)])
    estimate = estimate_for(open_model_file(first), 1024, draft=False)
    assert [layer.weights for layer in estimate.layers] == [4000, 12000]


def test_auto_flash_attention_on_a_cpu_is_on_for_a_windowed_model_and_off_for_a_float_one(gemma_files, demo_models):
    from app.backends.llama.backend import LlamaBackend
    from app.engine.gguf.model_file import open_model_file

    f16, _q4 = gemma_files
    # Gemma 3 attends through a sliding window: flash attention wins every phase there.
    assert estimate_for(open_model_file(f16), 4096, draft=False).shape.flash_attn is True
    # The demo target (F32, full attention): off, verification after a long prompt is dearer with it.
    assert estimate_for(open_model_file(demo_models.target), 4096, draft=False).shape.flash_attn is False
    for path, on in ((f16, True), (demo_models.target, False)):  # the load decides as the estimate did
        model = LlamaBackend(path, n_ctx=512, n_gpu_layers=0)
        try:
            assert model.flash_attention is on
        finally:
            model.close()
