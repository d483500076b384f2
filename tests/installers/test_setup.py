"""installers/setup.py's choice of llama.cpp build: the first variant whose probe survives.

The probes here are real child processes on this machine's real build; the one that
must die kills itself with SIGILL just before its first decode, standing in for a
native build whose AMX kernels die (nothing is compiled in these tests).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from app.backends import build_variants
from app.backends.build_check import run_probe_child
from app.backends.probe import SIMULATE_ENV

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup():
    spec = importlib.util.spec_from_file_location("tandem_setup_under_test", ROOT / "installers" / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def real_probe(dies: bool):
    env = dict(os.environ)
    env.pop(SIMULATE_ENV, None)
    if dies:
        env[SIMULATE_ENV] = "SIGILL"
    outcome = run_probe_child(env=env)
    return {"ok": outcome.ok, "detail": outcome.detail, "had_amx": outcome.had_amx, "rpc": outcome.has_rpc}


def run_choice(setup, candidates, dying: set[str]):
    installed: list[str] = []
    said: list[str] = []

    def install_variant(variant):
        installed.append(variant.name)

    def prove():
        return real_probe(installed[-1] in dying)

    chosen, failures = setup.choose_build(candidates, install_variant, prove,
                                          say=lambda line, **_: said.append(line))
    return chosen, failures, installed, said


@pytest.mark.skipif(not build_variants.is_x86(), reason="the AMX and AVX2 variants are x86-64 only")
def test_a_native_build_that_dies_falls_back(setup):
    chosen, failures, installed, said = run_choice(setup, build_variants.variants("cpu"), {"native"})
    # This build has no AMX in it, so "native without AMX" would be the same build: skipped.
    assert installed == ["native", "portable"]
    assert chosen.name == "portable"
    assert failures[0].startswith("native: llama.cpp was killed by SIGILL")
    assert failures[1].startswith("native-no-amx: skipped")
    assert said == ["llama.cpp build 'native' failed its probe "
                    "(llama.cpp was killed by SIGILL while decoding a test model); trying native-no-amx"]


@pytest.mark.skipif(not build_variants.is_x86(), reason="the AMX and AVX2 variants are x86-64 only")
def test_a_native_build_with_amx_that_dies_tries_native_without_amx(setup):
    installed: list[str] = []

    def prove():
        outcome = real_probe(installed[-1] == "native")
        return {**outcome, "had_amx": installed[-1] == "native"}  # as an AMX build reports itself

    chosen, failures = setup.choose_build(build_variants.variants("cpu"), lambda v: installed.append(v.name), prove,
                                          say=lambda *a, **k: None)
    assert installed == ["native", "native-no-amx"] and chosen.name == "native-no-amx"
    assert len(failures) == 1


def test_every_build_dying_is_reported(setup):
    custom = build_variants.custom("-DGGML_NATIVE=OFF -DGGML_AVX2=OFF")
    chosen, failures, installed, _ = run_choice(setup, [custom], {"custom"})
    assert chosen is None and installed == ["custom"]
    assert failures == ["custom: llama.cpp was killed by SIGILL while decoding a test model"]


def test_a_surviving_first_build_is_kept(setup):
    chosen, failures, installed, said = run_choice(setup, build_variants.variants("cpu"), set())
    assert chosen.name == "native" and installed == ["native"] and not failures and not said


def test_cmake_args_survive_scikit_build_cores_split():
    for variant in [*build_variants.variants("cpu"), *build_variants.variants("cuda")]:
        assert tuple(shlex.split(variant.cmake_args_env)) == variant.cmake_args
    assert build_variants.custom("-DA=1 '-DB=x y'").cmake_args == ("-DA=1", "-DB=x y", "-DGGML_RPC=ON")
    assert build_variants.custom("-DGGML_RPC=OFF").cmake_args == ("-DGGML_RPC=OFF",)  # the user's word wins


def test_every_variant_builds_the_rpc_backend():
    for backend in build_variants.GPU_FLAGS:
        for variant in [*build_variants.variants(backend), build_variants.portable(backend)]:
            assert "-DGGML_RPC=ON" in variant.cmake_args, variant.name


def test_a_build_that_should_have_rpc_and_has_not_fails(setup):
    """A probe that passes on a build lacking the RPC backend it was built with: the next variant."""
    installed: list[str] = []

    def prove():
        outcome = real_probe(False)
        assert outcome["rpc"], "this machine's build has the RPC backend (set-up builds it so)"
        return {**outcome, "rpc": installed[-1] != "native"}  # as a build without it reports itself

    chosen, failures = setup.choose_build(build_variants.variants("cpu"), lambda v: installed.append(v.name),
                                          prove, say=lambda *a, **k: None)
    assert len(installed) == 2 and installed[0] == "native" and chosen.name == installed[1]
    assert failures[0] == "native: built with -DGGML_RPC=ON, but it has no RPC backend"


def test_wheels_are_kept_per_flags_and_native_ones_per_cpu(setup, monkeypatch, tmp_path):
    monkeypatch.setenv("TANDEM_BUILD_CACHE", str(tmp_path))
    sdist = Path("llama_cpp_python-0.3.36.tar.gz")
    native, *rest = build_variants.variants("cpu")
    folders = {setup.wheel_folder(v, sdist) for v in [native, *rest]}
    assert len(folders) == len(rest) + 1 and all(f.parent == tmp_path / "wheels" for f in folders)
    before = setup.wheel_folder(native, sdist)
    portable = setup.wheel_folder(build_variants.portable(), sdist)
    monkeypatch.setattr(setup, "cpu_signature", lambda: "another CPU")
    assert setup.wheel_folder(native, sdist) != before          # a native build is this CPU's
    assert setup.wheel_folder(build_variants.portable(), sdist) == portable  # a portable one is anyone's


def test_setup_script_help_runs_with_the_bare_interpreter():
    # set-up runs before any dependency is installed: only the standard library may be needed.
    done = subprocess.run([sys.executable, "-S", str(ROOT / "installers" / "setup.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "native without AMX" in done.stdout
