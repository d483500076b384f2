"""Will llama.cpp survive on this machine? Probe it in a child process, once per build.

``pip install`` alone can produce a llama.cpp that dies on its first quantised
matrix product (see ``build_variants``); in-process that is a vanished window. So
before models are loaded, ``check_llama_build`` runs ``app.backends.probe`` in a
child and reads how it ended. A pass is remembered under the library files' paths,
sizes and modification times, so later starts cost a few ``stat`` calls; a failure
is never remembered (the next start probes again, in case the user rebuilt).

This module never imports ``llama_cpp``: the parent must not be the one that dies.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.backends import build_variants
from app.backends.probe import SIMULATE_ENV
from app.errors import TandemError

PROBE_FLAG = "--probe-llama"  # handled first thing by app.__main__
PROBE_TIMEOUT = 120.0
CACHE_NAME = "llama-build-check.json"
ROOT = Path(__file__).resolve().parents[2]


class BrokenBuildError(TandemError):
    """This machine's llama.cpp build does not run here."""


@dataclass
class ProbeOutcome:
    ok: bool
    detail: str                     # one line: what happened
    returncode: int | None = None
    signal_name: str = ""
    records: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def had_amx(self) -> bool:
        return any("AMX_INT8 = 1" in r.get("system_info", "") for r in self.records)

    @property
    def has_rpc(self) -> bool:
        """Whether the build has llama.cpp's RPC backend (said by a probe that finished)."""
        return any(r.get("rpc") is True for r in self.records)


@dataclass
class BuildCheck:
    ok: bool
    cached: bool
    seconds: float
    message: str = ""               # one line, for the terminal and the window, when not ok
    rebuild: str = ""               # the exact command that mends it

    def raise_if_broken(self) -> None:
        if not self.ok:
            raise BrokenBuildError(f"{self.message} Rebuild it with: {self.rebuild}")


def probe_command() -> list[str]:
    if getattr(sys, "frozen", False):  # the bundle's executable is the interpreter
        return [sys.executable, PROBE_FLAG]
    return [sys.executable, "-m", "app", PROBE_FLAG]


def run_probe_child(*, gpu_layers: int = -1, env: dict | None = None,
                    timeout: float = PROBE_TIMEOUT) -> ProbeOutcome:
    """Run the probe in a child process and say how it ended (never raises)."""
    started = time.perf_counter()
    cmd = [*probe_command(), "--gpu-layers", str(gpu_layers)]
    child_env = dict(os.environ if env is None else env)
    if not getattr(sys, "frozen", False):
        # The child must import this checkout's ``app``, wherever it was started from.
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), child_env.get("PYTHONPATH")]))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env)
    except subprocess.TimeoutExpired:
        return ProbeOutcome(False, f"the llama.cpp probe did not finish in {timeout:.0f} s",
                            seconds=time.perf_counter() - started)
    except OSError as exc:
        return ProbeOutcome(False, f"the llama.cpp probe could not start ({exc})",
                            seconds=time.perf_counter() - started)
    records = [r for r in map(json_record, done.stdout.splitlines()) if r is not None]
    seconds = time.perf_counter() - started
    final = records[-1] if records and records[-1].get("stage") == "done" else {}
    if done.returncode < 0:
        name = _signal_name(-done.returncode)
        return ProbeOutcome(False, f"llama.cpp was killed by {name} while decoding a test model",
                            done.returncode, name, records, seconds)
    if done.returncode == 0 and final.get("ok"):
        return ProbeOutcome(True, "llama.cpp decoded the test model", 0, "", records, seconds)
    if final.get("error"):
        why = final["error"]
    elif final and not final.get("finite", True):
        why = "llama.cpp gave non-finite logits for a test model"
    else:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        why = f"the llama.cpp probe exited with code {done.returncode} ({last[:200]})"
    return ProbeOutcome(False, why, done.returncode, "", records, seconds)


def json_record(line: str | bytes) -> dict | None:
    """One JSON-object line a probe child printed; None for anything else (llama.cpp's own output)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def library_files() -> list[Path]:
    """llama.cpp's shared libraries as llama_cpp will load them (found without importing it)."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        folder = Path(override)
    elif getattr(sys, "frozen", False):
        folder = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent)) / "llama_cpp" / "lib"
    else:
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or not spec.submodule_search_locations:
            return []
        folder = Path(list(spec.submodule_search_locations)[0]) / "lib"
    try:
        return sorted(p for p in folder.iterdir() if p.is_file())
    except OSError:
        return []


def fingerprint(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    # A simulated death (tests) must never be answered from a real build's pass.
    digest.update(os.environ.get(SIMULATE_ENV, "").encode())
    return digest.hexdigest()


def rebuild_command(outcome: ProbeOutcome) -> str:
    """In a checkout, set-up (which probes and falls back by itself); else one pip command."""
    if not getattr(sys, "frozen", False) and (ROOT / "installers" / "setup.py").is_file():
        return f"python3 {ROOT / 'installers' / 'setup.py'}"
    if getattr(sys, "frozen", False):
        return "download the portable bundle, or install Tandem from source (installers/setup.py)"
    backend = _installed_backend()
    variant = (build_variants.variants(backend)[1] if outcome.had_amx and build_variants.is_x86()
               else build_variants.portable(backend) if build_variants.is_x86()
               else build_variants.variants(backend)[-1])
    return build_variants.pip_rebuild_command(variant)


def _installed_backend() -> str:
    names = " ".join(p.name.lower() for p in library_files())
    return "cuda" if "cuda" in names else "metal" if "metal" in names else "cpu"


def check_llama_build(*, cache_dir: Path | None = None, use_cache: bool = True) -> BuildCheck:
    """Probe the installed llama.cpp unless this very build already passed here."""
    started = time.perf_counter()
    files = library_files()
    cache = None
    key = ""
    if files and use_cache:
        if cache_dir is None:
            from app.storage import paths

            cache_dir = paths.cache_dir()
        cache = cache_dir / CACHE_NAME
        key = fingerprint(files)
        if _cached_pass(cache) == key:
            return BuildCheck(True, True, time.perf_counter() - started)
    outcome = run_probe_child()
    if outcome.ok:
        if cache is not None:
            _remember_pass(cache, key, outcome)
        return BuildCheck(True, False, time.perf_counter() - started)
    return BuildCheck(False, False, time.perf_counter() - started,
                      message=f"This machine's llama.cpp build does not run here: {outcome.detail}.",
                      rebuild=rebuild_command(outcome))


def _cached_pass(cache: Path) -> str | None:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # missing or damaged: probe again, it costs under a second
    return data.get("passed") if isinstance(data, dict) and isinstance(data.get("passed"), str) else None


def _remember_pass(cache: Path, key: str, outcome: ProbeOutcome) -> None:
    record = {"passed": key, "seconds": round(outcome.seconds, 3),
              "checked": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass  # a read-only cache only means probing again next time
