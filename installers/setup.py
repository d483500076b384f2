#!/usr/bin/env python3
"""Set up Tandem in ./.venv and (optionally) launch it or run its tests.

    python3 installers/setup.py --run     # install, then open the app on the demo pair
    python3 installers/setup.py --test    # install with test tools, then run every test

llama-cpp-python is compiled for the best backend this machine has: CUDA when an
NVIDIA toolkit (nvcc) *and* driver are present, Metal on macOS, CPU otherwise
(TANDEM_BACKEND=cpu|cuda|metal overrides the choice). Every build has llama.cpp's RPC
backend (-DGGML_RPC=ON, for ``tandem worker`` and ``--rpc``); the probe checks it is there.

A build that compiles can still die on its first matrix product (on Xeons with AMX,
llama.cpp's AMX kernels raise SIGILL), so set-up proves the build before it says
"Installed": a child process decodes a tiny quantised model (app.backends.probe).
If the child dies or its logits are not finite, set-up builds the next variant of
app/backends/build_variants.py: native, native without AMX, portable AVX2, baseline.
Your own CMAKE_ARGS, if set, replace that list (and are probed the same way).
Each build is kept as a wheel under the build cache (TANDEM_BUILD_CACHE, else your
user cache folder's tandem-build/), keyed by its flags, the llama-cpp-python version
and, for native builds, this CPU: pip's own wheel cache ignores CMAKE_ARGS, so it is
never used for llama-cpp-python.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
LLAMA_CPP = "llama-cpp-python>=0.3.36"
MARKER = VENV / "tandem-llama-build.json"


def _load_variants():
    """app/backends/build_variants.py, by path: the venv and its packages may not exist yet."""
    spec = importlib.util.spec_from_file_location("tandem_build_variants",
                                                  ROOT / "app" / "backends" / "build_variants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


variants = _load_variants()


def choose_backend() -> tuple[str, str]:
    forced = os.environ.get("TANDEM_BACKEND", "").lower()
    if forced in variants.GPU_FLAGS:
        return forced, "chosen by TANDEM_BACKEND"
    if platform.system() == "Darwin":
        return "metal", "macOS"
    nvcc = shutil.which("nvcc") or (Path("/usr/local/cuda/bin/nvcc") if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    driver = Path("/proc/driver/nvidia/version").exists() or _nvidia_smi_works()
    if nvcc and driver:
        return "cuda", f"NVIDIA toolkit at {nvcc} and a driver"
    if nvcc:
        return "cpu", "nvcc found but no NVIDIA driver, so no GPU to run on"
    return "cpu", "no NVIDIA toolkit found"


def _nvidia_smi_works() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def pip(*args: str, env: dict | None = None) -> None:
    subprocess.run([str(venv_python()), "-m", "pip", "--disable-pip-version-check", *args],
                   check=True, env=env)


# -- the build cache ------------------------------------------------------------------
def build_cache() -> Path:
    if os.environ.get("TANDEM_BUILD_CACHE"):
        return Path(os.environ["TANDEM_BUILD_CACHE"])
    if os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tandem-build"


def cpu_signature() -> str:
    """What a native build depends on: the CPU's model and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "flags", "Features", "CPU part") and key not in fields:
            fields[key] = value.strip()
    return json.dumps(fields, sort_keys=True)


def resolve_sdist() -> Path:
    """The newest llama-cpp-python sdist allowed by LLAMA_CPP, downloaded once."""
    folder = build_cache() / "sdist"
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(venv_python()), "-m", "pip", "--disable-pip-version-check", "download",
                           "--no-deps", "--no-binary", "llama-cpp-python", "-d", str(folder), LLAMA_CPP],
                          capture_output=True, text=True)
    for line in done.stdout.splitlines():
        for lead in ("Saved ", "File was already downloaded "):
            if line.strip().startswith(lead):
                return Path(line.strip()[len(lead):].strip())
    offline = sorted(folder.glob("llama_cpp_python-*.tar.gz"))
    if offline:  # no index reachable: the newest sdist already here
        return offline[-1]
    sys.exit(f"setup: could not download llama-cpp-python: {(done.stderr.strip().splitlines() or ['?'])[-1]}")


def wheel_folder(variant, sdist: Path) -> Path:
    """Where ``variant``'s wheel of ``sdist`` is kept: one folder per version, flags and (native) CPU."""
    key = hashlib.sha256("\n".join([
        sdist.name, variant.cmake_args_env, sysconfig.get_platform(), sys.implementation.cache_tag,
        cpu_signature() if variant.name.startswith("native") or variant.name == "custom" else "",
    ]).encode()).hexdigest()[:16]
    return build_cache() / "wheels" / f"{variant.name}-{key}"


def wheel_for(variant, sdist: Path) -> Path:
    """A wheel of ``sdist`` built with ``variant``'s flags: from the build cache, else built now."""
    folder = wheel_folder(variant, sdist)
    found = sorted(folder.glob("llama_cpp_python-*.whl"))
    if found:
        print(f"Reusing the {variant.name} build of {sdist.name} from {folder}")
        return found[-1]
    print(f"Building llama-cpp-python, {variant.description} (5-10 minutes): CMAKE_ARGS={variant.cmake_args_env}",
          flush=True)
    scratch = folder.with_name(folder.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    env = {**os.environ, "CMAKE_ARGS": variant.cmake_args_env}
    pip("wheel", "--quiet", "--no-deps", "--no-cache-dir", "-w", str(scratch), str(sdist), env=env)
    shutil.rmtree(folder, ignore_errors=True)
    scratch.rename(folder)
    return sorted(folder.glob("llama_cpp_python-*.whl"))[-1]


# -- proving a build ---------------------------------------------------------------------
def probe(env_extra: dict | None = None) -> dict:
    """Run app.backends.probe in a child of a child: how did it end? (ok, detail, had_amx)"""
    code = ("import json; from app.backends.build_check import run_probe_child; o = run_probe_child(); "
            "print(json.dumps({'ok': o.ok, 'detail': o.detail, 'had_amx': o.had_amx, 'rpc': o.has_rpc, "
            "'seconds': o.seconds}))")
    env = {**os.environ, **(env_extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([str(venv_python()), "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"ok": False, "detail": f"the probe could not run: {(done.stderr.strip().splitlines() or ['?'])[-1]}",
                "had_amx": False}


def read_marker() -> dict:
    try:
        data = json.loads(MARKER.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def llama_importable() -> bool:
    return subprocess.run([str(venv_python()), "-c", "import llama_cpp"], capture_output=True).returncode == 0


def choose_build(candidates: list, install_variant, prove, say=print) -> tuple[object | None, list[str]]:
    """Install and prove each candidate in turn; the first that survives its probe wins.

    ``install_variant(variant)`` makes it the installed llama.cpp; ``prove()`` probes it.
    Returns the winner (None if every one died) and one line per failure.
    """
    failures: list[str] = []
    skip_no_amx = False
    for i, variant in enumerate(candidates):
        if variant.name == "native-no-amx" and skip_no_amx:
            failures.append("native-no-amx: skipped (the native build had no AMX in it, so it would be the same)")
            continue
        install_variant(variant)
        outcome = prove()
        if outcome["ok"] and variants.RPC in variant.cmake_args and not outcome.get("rpc", False):
            # Built with it and without it: the flag did not take (an old sdist, a cached wheel).
            outcome = {**outcome, "ok": False, "detail": "built with -DGGML_RPC=ON, but it has no RPC backend"}
        if outcome["ok"]:
            return variant, failures
        failures.append(f"{variant.name}: {outcome['detail']}")
        skip_no_amx = variant.name == "native" and not outcome.get("had_amx", False)
        rest = [c.name for c in candidates[i + 1:]]
        say(f"llama.cpp build '{variant.name}' failed its probe ({outcome['detail']})"
            + (f"; trying {rest[0]}" if rest else ""), flush=True)
    return None, failures


def install(with_tests: bool) -> None:
    if not venv_python().exists():
        print(f"Creating virtual environment in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    backend, why = choose_backend()
    print(f"llama.cpp backend: {backend.upper()} ({why})")
    user_args = os.environ.get("CMAKE_ARGS", "").strip()
    candidates = [variants.custom(user_args)] if user_args else variants.variants(backend)
    target = f"{ROOT}[test]" if with_tests else str(ROOT)
    marker = read_marker()
    project_installed = False

    def install_project() -> None:
        nonlocal project_installed
        if not project_installed:
            pip("install", "--quiet", "-e", target)
            project_installed = True

    # Keep what is installed if set-up made it for these candidates and it still passes.
    current = next((c for c in candidates if marker.get("backend") == backend
                    and marker.get("cmake_args") == c.cmake_args_env), None)
    if current is not None and llama_importable():
        install_project()
        outcome = probe()
        if outcome["ok"]:
            print(f"llama.cpp build: {current.name} - {current.description}; probe passed "
                  f"({outcome['seconds']:.1f} s). Installed.")
            return
        print(f"The installed llama.cpp build ({current.name}) failed its probe: {outcome['detail']}")
        candidates = candidates[candidates.index(current) + 1:] or candidates

    sdist = resolve_sdist()

    def install_variant(variant) -> None:
        pip("install", "--quiet", "--force-reinstall", "--no-deps", str(wheel_for(variant, sdist)))
        MARKER.unlink(missing_ok=True)
        install_project()  # after llama-cpp-python, or pip would build it from source itself

    chosen, failures = choose_build(candidates, install_variant, probe)
    if chosen is None:
        hint = ("unset CMAKE_ARGS to let set-up choose" if user_args
                else "please report this with the lines above")
        sys.exit("setup: no llama.cpp build survived its probe here (" + "; ".join(failures) + f"); {hint}")
    MARKER.write_text(json.dumps({"backend": backend, "variant": chosen.name,
                                  "cmake_args": chosen.cmake_args_env, "sdist": sdist.name,
                                  "failed": failures}, indent=1) + "\n")
    print(f"llama.cpp build: {chosen.name} - {chosen.description}"
          + (f" (after: {'; '.join(failures)})" if failures else "") + ". Installed.", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--run", action="store_true", help="launch Tandem after installing")
    action.add_argument("--test", action="store_true", help="run the test suite after installing")
    # Anything else is passed on: to tandem with --run, to pytest with --test.
    args, passed_on = parser.parse_known_args()
    install(with_tests=args.test)
    python = str(venv_python())
    if args.test:
        os.chdir(ROOT)
        contracts = subprocess.run([str(VENV / "bin" / "lint-imports")])
        if contracts.returncode != 0:
            return contracts.returncode
        return subprocess.run([python, "-m", "pytest", *passed_on]).returncode
    if args.run:
        return subprocess.run([python, "-m", "app", *passed_on]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
