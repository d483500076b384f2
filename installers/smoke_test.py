#!/usr/bin/env python3
"""Smoke test of the bundle: build it (or reuse it), then run it headless.

    python3 installers/smoke_test.py            # build if stale, then test dist/tandem
    python3 installers/smoke_test.py --rebuild  # always rebuild first

Steps, each with its exit code in the summary:
1. build      installers/build_bundle.py --if-stale (timed)
2. libraries  (Linux) every library the bundle ships resolves its Qt/llama.cpp/Python
              dependencies inside the bundle (ldd)
3. help       dist/tandem/tandem --help
4. bundle     dist/tandem/tandem-bundle-check: Qt starts offscreen, icon/palette/style
              load from app.resources, llama.cpp libraries load from the bundle, every
              app module imports
5. self-test  dist/tandem/tandem --self-test on the demo pair (QT_QPA_PLATFORM=offscreen),
              found through app.storage.paths exactly as the installed app finds it
6. window     dist/tandem/tandem (the chat window, offscreen) must still be running,
              without a traceback, after WINDOW_SECONDS; then it is terminated. It runs
              with TANDEM_HOME in a scratch folder (the demo models linked in), so the
              user's settings and chats are never touched

The bundle runs from a scratch directory with PYTHONPATH, PYTHONHOME and the
venv removed from the environment, so it cannot lean on the checkout.
Exit 0 when every step passes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "installers"))
import build_bundle  # noqa: E402  (a sibling script, not a package)

# Libraries the bundle must carry itself; anything else (libc, X11, GL, ...) is the system's.
WINDOW_SECONDS = 12
BUNDLED_PREFIXES = ("libQt6", "libpyside6", "libshiboken6", "libicu", "libggml", "libllama",
                    "libmtmd", "libpython")


def bundle_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    venv_bin = str(build_bundle.venv_python().parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["QT_QPA_PLATFORM"] = "offscreen"
    return env


def run_step(name: str, cmd: list[str], results: list, *, timeout: int = 900) -> subprocess.CompletedProcess | None:
    print(f"\n== {name}: {' '.join(map(str, cmd))}", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tandem-smoke-") as scratch:
        try:
            proc = subprocess.run([str(c) for c in cmd], cwd=scratch, env=bundle_env(), timeout=timeout,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except subprocess.TimeoutExpired:
            results.append((name, "timeout", time.monotonic() - started))
            print(f"{name}: no answer after {timeout} s")
            return None
    print(proc.stdout, end="" if proc.stdout.endswith("\n") else "\n")
    results.append((name, proc.returncode, time.monotonic() - started))
    return proc


def check_libraries(results: list) -> None:
    """ldd every ELF library in the bundle; report bundle-owned dependencies that do not resolve."""
    print("\n== libraries: ldd over the bundle's shared libraries", flush=True)
    started = time.monotonic()
    if not sys.platform.startswith("linux") or not shutil.which("ldd"):
        print("skipped (Linux only)")
        return
    missing = set()
    files = [p for p in build_bundle.BUNDLE.rglob("*.so*") if p.is_file() and not p.is_symlink()]
    for path in files:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if "not found" in line and line.strip().startswith(BUNDLED_PREFIXES):
                missing.add(f"{path.relative_to(build_bundle.BUNDLE)} needs {line.split()[0]}")
    for entry in sorted(missing):
        print("  missing:", entry)
    print(f"{len(files)} libraries checked, {len(missing)} unresolved bundle dependencies")
    results.append(("libraries", 1 if missing else 0, time.monotonic() - started))


def demo_model_paths() -> list[Path]:
    """The demo pair as the app finds it (provisioned by --self-test just before)."""
    code = "from app.models.demo import demo_pair; p = demo_pair(); print(p.target); print(p.draft)"
    out = subprocess.run([str(build_bundle.venv_python()), "-c", code], capture_output=True, text=True, check=True)
    return [Path(line) for line in out.stdout.splitlines() if line.strip()]


def check_window(results: list) -> None:
    """Start the chat window offscreen; it must still be running WINDOW_SECONDS later."""
    print(f"\n== window: {build_bundle.APP_EXE} (offscreen, {WINDOW_SECONDS} s)", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tandem-smoke-home-") as home:
        models = Path(home) / "cache" / "models"
        models.mkdir(parents=True)
        for model in demo_model_paths():
            (models / model.name).symlink_to(model)
        env = {**bundle_env(), "TANDEM_HOME": home}
        with tempfile.TemporaryFile("w+") as log:
            proc = subprocess.Popen([str(build_bundle.APP_EXE)], cwd=home, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, text=True)
            try:
                rc = proc.wait(timeout=WINDOW_SECONDS)
            except subprocess.TimeoutExpired:
                rc = None  # still running: what a window should do
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.seek(0)
            output = log.read()
    print(output, end="" if not output or output.endswith("\n") else "\n")
    if rc is not None:
        print(f"the window exited by itself (exit {rc})")
        status = rc or 1
    elif "Traceback" in output:
        print("the window is running but printed a traceback")
        status = 1
    else:
        print(f"still running after {WINDOW_SECONDS} s; closed")
        status = 0
    results.append(("window", status, time.monotonic() - started))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rebuild", action="store_true", help="build even when dist/tandem is up to date")
    args = parser.parse_args(argv)
    results: list[tuple[str, int | str, float]] = []

    print("== build", flush=True)
    started = time.monotonic()
    build_rc = build_bundle.main([] if args.rebuild else ["--if-stale"])
    results.append(("build", build_rc, time.monotonic() - started))
    if build_rc == 0:
        check_libraries(results)
        run_step("help", [build_bundle.APP_EXE, "--help"], results, timeout=120)
        run_step("bundle check", [build_bundle.CHECK_EXE], results, timeout=300)
        run_step("self-test", [build_bundle.APP_EXE, "--self-test"], results)
        check_window(results)

    print("\n== summary")
    if build_bundle.BUNDLE.exists():
        print(f"bundle size: {build_bundle.folder_size(build_bundle.BUNDLE) / 2**20:.0f} MiB ({build_bundle.BUNDLE})")
    for name, rc, seconds in results:
        print(f"  {name:<13} exit {rc!s:<8} {seconds:6.1f} s")
    ok = len(results) >= 5 and all(rc == 0 for _, rc, _ in results)
    print("SMOKE TEST " + ("PASSED" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
