#!/usr/bin/env python3
"""Build the one-folder Tandem bundle: dist/tandem/ (and dist/Tandem.app on macOS).

    python3 installers/build_bundle.py             # build (sets up .venv first if needed)
    python3 installers/build_bundle.py --if-stale  # reuse dist/tandem when nothing changed
    python3 installers/build_bundle.py --clean     # throw away PyInstaller's cache first

Works the same on Linux, Windows and macOS; a bundle runs only on the OS (and
CPU architecture) it was built on, with the llama.cpp backend this machine's
.venv was built for (installers/setup.py picks CUDA, Metal or CPU).
A bundle cannot know its user's CPU, so on x86-64 it carries the *portable*
llama.cpp build (AVX2, FMA, F16C; app/backends/build_variants.py), not the
.venv's native one: built once into set-up's build cache, unpacked to
build/llama-libs/, and probed (a child decodes a tiny quantised model) before
PyInstaller runs. A build that fails its probe is never bundled.
Prints the bundle's size and the build time.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "installers" / "tandem.spec"
DIST = ROOT / "dist"
WORK = ROOT / "build" / "pyinstaller"
STAMP = ROOT / "build" / "tandem-bundle.stamp"
BUNDLE = DIST / "tandem"
EXE_SUFFIX = ".exe" if os.name == "nt" else ""
APP_EXE = BUNDLE / f"tandem{EXE_SUFFIX}"
CHECK_EXE = BUNDLE / f"tandem-bundle-check{EXE_SUFFIX}"
MAC_APP = DIST / "Tandem.app"
# What the bundle is made of, besides the installed packages.
INPUTS = [ROOT / "app", SPEC, ROOT / "installers" / "bundle_check.py", ROOT / "pyproject.toml"]
LIBS_ROOT = ROOT / "build" / "llama-libs"
LIBS_ENV = "TANDEM_BUNDLE_LLAMA_LIBS"  # read by tandem.spec


def _setup_module():
    spec = importlib.util.spec_from_file_location("tandem_setup", ROOT / "installers" / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def venv_python() -> Path:
    return ROOT / ".venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def bundle_requirements() -> list[str]:
    """The ``bundle`` extra of pyproject.toml (PyInstaller; Pillow for icons on Windows/macOS)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"]["bundle"]


def ensure_environment() -> None:
    """The app and PyInstaller in .venv, installing whatever is missing."""
    python = venv_python()
    probe = "import app, llama_cpp, PySide6, qasync, gguf, jinja2"
    if not python.exists() or subprocess.run([str(python), "-c", probe], capture_output=True).returncode:
        print("Setting up .venv first (installers/setup.py)")
        _setup_module().install(with_tests=False)
    if subprocess.run([str(python), "-c", "import PyInstaller"], capture_output=True).returncode:
        print("Installing", ", ".join(bundle_requirements()))
    # Cheap when already satisfied; also brings Pillow where the spec converts icons.
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *bundle_requirements()], check=True)


def unpack_libs(wheel: Path) -> Path:
    """llama_cpp/lib/ of a cached llama-cpp-python wheel, unpacked once under build/llama-libs/."""
    folder = LIBS_ROOT / wheel.parent.name / "lib"
    if not folder.is_dir():
        scratch = folder.with_name("lib.partial")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.startswith("llama_cpp/lib/") and not member.endswith("/"):
                    (scratch / Path(member).name).write_bytes(archive.read(member))
        scratch.rename(folder)
    return folder


def bundle_llama_libs() -> Path | None:
    """llama.cpp's libraries for the bundle: the portable build, probed; None = the .venv's own."""
    setup = _setup_module()
    if not setup.variants.is_x86():
        return None  # no portable x86 build to choose: the .venv's build, probed by set-up
    backend = setup.read_marker().get("backend") or setup.choose_backend()[0]
    variant = setup.variants.portable(backend)
    folder = unpack_libs(setup.wheel_for(variant, setup.resolve_sdist()))
    outcome = setup.probe({"LLAMA_CPP_LIB_PATH": str(folder)})
    if not outcome["ok"]:
        raise SystemExit(f"build_bundle: the {variant.name} llama.cpp build failed its probe "
                         f"({outcome['detail']}); not bundling it")
    print(f"llama.cpp for the bundle: {variant.description}, probed ({folder})")
    return folder


def _site_packages() -> Path:
    out = subprocess.run([str(venv_python()), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def fingerprint() -> str:
    """Changes whenever the app's files, the spec or the installed packages change."""
    digest = hashlib.sha256()
    for root in INPUTS:
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(ROOT)).encode())
                digest.update(path.read_bytes())
    site = _site_packages()
    for entry in sorted(site.glob("*.dist-info")):  # names carry versions
        digest.update(entry.name.encode())
    libs = os.environ.get(LIBS_ENV)
    for lib in sorted((Path(libs) if libs else site / "llama_cpp" / "lib").glob("*")):  # another build
        stat = lib.stat()
        digest.update(f"{lib}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def is_up_to_date() -> bool:
    return APP_EXE.exists() and CHECK_EXE.exists() and STAMP.exists() and STAMP.read_text().strip() == fingerprint()


def folder_size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def build(clean: bool = False) -> float:
    """Run PyInstaller on the spec; returns the seconds it took."""
    cmd = [str(venv_python()), "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
           "--distpath", str(DIST), "--workpath", str(WORK), str(SPEC)]
    if clean:
        cmd.insert(3, "--clean")
    print("Building the bundle:", " ".join(cmd[1:]), flush=True)
    started = time.monotonic()
    STAMP.unlink(missing_ok=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    elapsed = time.monotonic() - started
    STAMP.parent.mkdir(parents=True, exist_ok=True)
    STAMP.write_text(fingerprint() + "\n")
    return elapsed


def report(elapsed: float | None) -> None:
    print(f"Bundle:     {BUNDLE}  ({folder_size(BUNDLE) / 2**20:.0f} MiB, {sum(1 for _ in BUNDLE.rglob('*'))} files)")
    if MAC_APP.exists():
        print(f"macOS app:  {MAC_APP}  ({folder_size(MAC_APP) / 2**20:.0f} MiB)")
    print(f"Run:        {APP_EXE}  (or --self-test; {CHECK_EXE.name} checks the bundle)")
    print("Build time: " + (f"{elapsed:.0f} s" if elapsed is not None else "reused (up to date)"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--if-stale", action="store_true", help="skip the build when dist/tandem is up to date")
    parser.add_argument("--clean", action="store_true", help="clear PyInstaller's cache before building")
    args = parser.parse_args(argv)
    ensure_environment()
    libs = bundle_llama_libs()
    if libs is not None:
        os.environ[LIBS_ENV] = str(libs)
    if args.if_stale and not args.clean and is_up_to_date():
        report(None)
        return 0
    try:
        elapsed = build(clean=args.clean)
    except subprocess.CalledProcessError as exc:
        print(f"build_bundle: PyInstaller failed (exit {exc.returncode})", file=sys.stderr)
        return exc.returncode or 1
    report(elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
