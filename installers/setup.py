#!/usr/bin/env python3
"""Set up Tandem in ./.venv and (optionally) launch it or run its tests.

    python3 installers/setup.py --run     # install, then open the app on the demo pair
    python3 installers/setup.py --test    # install with test tools, then run every test

llama-cpp-python is compiled for the best backend this machine has: CUDA when an
NVIDIA toolkit (nvcc) *and* driver are present, Metal on macOS, CPU otherwise.
TANDEM_BACKEND=cpu|cuda|metal overrides the choice; CMAKE_ARGS, if set, is passed on.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
LLAMA_CPP = "llama-cpp-python>=0.3.36"
CMAKE_FLAGS = {"cuda": "-DGGML_CUDA=on", "metal": "-DGGML_METAL=on", "cpu": ""}


def choose_backend() -> tuple[str, str]:
    forced = os.environ.get("TANDEM_BACKEND", "").lower()
    if forced in CMAKE_FLAGS:
        return forced, "chosen by TANDEM_BACKEND"
    if platform.system() == "Darwin":
        return "metal", "macOS"
    nvcc = shutil.which("nvcc") or (Path("/usr/local/cuda/bin/nvcc") if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    driver = Path("/proc/driver/nvidia/version").exists() or _nvidia_smi_works()
    if nvcc and driver:
        return "cuda", f"NVIDIA toolkit at {nvcc} and a driver"
    if nvcc:
        return "cpu", "nvcc found but no NVIDIA driver, so no GPU to run on"
    return "cpu", "no NVIDIA toolkit found" if platform.system() != "Darwin" else "macOS"


def _nvidia_smi_works() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def pip(*args: str, env: dict | None = None) -> None:
    subprocess.run([str(venv_python()), "-m", "pip", "--disable-pip-version-check", *args],
                   check=True, env=env)


def installed_backend() -> str | None:
    marker = VENV / "tandem-llama-backend.txt"
    probe = subprocess.run([str(venv_python()), "-c", "import llama_cpp"], capture_output=True)
    return marker.read_text().strip() if marker.exists() and probe.returncode == 0 else None


def install(with_tests: bool) -> None:
    if not venv_python().exists():
        print(f"Creating virtual environment in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    backend, why = choose_backend()
    print(f"llama.cpp backend: {backend.upper()} ({why})")
    if installed_backend() != backend:
        env = dict(os.environ)
        env["CMAKE_ARGS"] = " ".join(filter(None, [env.get("CMAKE_ARGS", ""), CMAKE_FLAGS[backend]]))
        # A cached CPU wheel must not stand in for a GPU build.
        extra = ["--no-cache-dir", "--force-reinstall", "--no-deps"] if backend != "cpu" else []
        print("Building llama-cpp-python (about 5 minutes the first time; pip caches the result)")
        pip("install", *extra, LLAMA_CPP, env=env)
        (VENV / "tandem-llama-backend.txt").write_text(backend + "\n")
    target = f"{ROOT}[test]" if with_tests else str(ROOT)
    pip("install", "--quiet", "-e", target)
    print("Installed. Backend:", backend.upper())


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
