"""The llama.cpp build probe: it passes on this machine's real build, and a child that
dies (a child killing itself with SIGILL stands in for a bad build) is reported in
one line with the command that mends it, never remembered as a pass."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from app.backends import build_check, build_variants
from app.backends.build_check import ProbeOutcome, check_llama_build, run_probe_child
from app.backends.probe import N_VOCAB, SIMULATE_ENV, write_probe_model
from app.engine.gguf.header import validate_gguf
from app.engine.gguf.meta import read_metadata


def test_probe_passes_on_the_real_build():
    outcome = run_probe_child()
    assert outcome.ok, outcome.detail
    assert outcome.returncode == 0 and outcome.signal_name == ""
    stages = [r["stage"] for r in outcome.records]
    assert stages == ["loaded", "done"]
    done = outcome.records[-1]
    assert done["finite"] is True and done["threads"] >= 1
    assert "CPU" in outcome.records[0]["system_info"]


def test_probe_model_is_quantised_with_shapes_amx_kernels_take(tmp_path):
    path = write_probe_model(tmp_path / "probe.gguf")
    validate_gguf(path)  # the app's own validator accepts it
    import gguf

    reader = gguf.GGUFReader(path)
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q4_0
    assert types["blk.0.ffn_gate.weight"] == gguf.GGMLQuantizationType.Q8_0
    # llama.cpp's AMX path takes a product only when both sides are multiples of 32.
    assert all(int(d) % 32 == 0 for t in reader.tensors if t.tensor_type != gguf.GGMLQuantizationType.F32
               for d in t.shape)
    assert read_metadata(path).n_vocab == N_VOCAB


def test_a_child_killed_by_sigill_is_a_failure_with_its_signal(monkeypatch):
    monkeypatch.setenv(SIMULATE_ENV, "SIGILL")
    outcome = run_probe_child()
    assert not outcome.ok
    assert outcome.signal_name == "SIGILL" and outcome.returncode < 0
    assert "SIGILL" in outcome.detail
    # It said what was in the build before it died.
    assert outcome.records and outcome.records[0]["stage"] == "loaded"


def test_a_pass_is_remembered_and_a_failure_is_not(tmp_path, monkeypatch):
    first = check_llama_build(cache_dir=tmp_path)
    assert first.ok and not first.cached
    second = check_llama_build(cache_dir=tmp_path)
    assert second.ok and second.cached
    monkeypatch.setenv(SIMULATE_ENV, "SIGILL")
    broken = check_llama_build(cache_dir=tmp_path)
    assert not broken.ok and not broken.cached
    assert "\n" not in broken.message and "SIGILL" in broken.message
    assert broken.rebuild == f"python3 {build_check.ROOT / 'installers' / 'setup.py'}"
    with pytest.raises(build_check.BrokenBuildError, match="Rebuild it with: python3 .*setup.py"):
        broken.raise_if_broken()
    monkeypatch.delenv(SIMULATE_ENV)
    assert check_llama_build(cache_dir=tmp_path).cached  # the real build's pass still stands


def test_a_damaged_cache_means_probing_again(tmp_path):
    (tmp_path / build_check.CACHE_NAME).write_text("{not json")
    check = check_llama_build(cache_dir=tmp_path)
    assert check.ok and not check.cached
    assert check_llama_build(cache_dir=tmp_path).cached


def test_outside_a_checkout_the_rebuild_is_one_pip_command(tmp_path, monkeypatch):
    monkeypatch.setattr(build_check, "ROOT", tmp_path)  # no installers/setup.py there
    amx = ProbeOutcome(False, "killed", records=[{"stage": "loaded", "system_info": "AMX_INT8 = 1 |"}])
    command = build_check.rebuild_command(amx)
    words = shlex.split(command)
    assert words[0].startswith("CMAKE_ARGS=") and "--no-cache-dir" in words and "--force-reinstall" in words
    cmake_args = shlex.split(words[0].removeprefix("CMAKE_ARGS="))  # as scikit-build-core splits it
    if build_variants.is_x86():
        assert cmake_args == list(build_variants.variants("cpu")[1].cmake_args)
        assert "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in cmake_args
        no_amx = ProbeOutcome(False, "killed", records=[{"stage": "loaded", "system_info": "AVX2 = 1 |"}])
        portable = shlex.split(shlex.split(build_check.rebuild_command(no_amx))[0].removeprefix("CMAKE_ARGS="))
        assert portable == list(build_variants.portable().cmake_args) and "-DGGML_RPC=ON" in portable


def test_library_files_are_the_installed_llama_cpp(monkeypatch, tmp_path):
    import llama_cpp

    files = build_check.library_files()
    assert files and all(f.parent == Path(llama_cpp.__file__).parent / "lib" for f in files)
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(tmp_path))
    (tmp_path / "libllama.so").write_bytes(b"x")
    assert build_check.library_files() == [tmp_path / "libllama.so"]
