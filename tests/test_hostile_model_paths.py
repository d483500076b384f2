"""Model paths that name no model, through the real CLI: one clean line each, no traceback.

A symlink loop once ended ``tandem generate`` in "RuntimeError: Symlink loop ..."; the
path is now resolved once per load (``app.engine.gguf.model_file``), and every way it can
fail to name a readable regular file is a ``ModelFileError``. Each case runs as
``tandem generate`` and ``tandem check-pair`` in a child process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 60


def _unreadable(path: Path) -> list[str] | None:
    """The command prefix under which ``path`` (mode 0) cannot be read; None where no
    such prefix exists. Root reads any file: it runs without the two capabilities that
    let it (util-linux's setpriv)."""
    path.chmod(0)
    if sys.platform == "win32":
        return None
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps=-all", "--"]


def _make(case: str, tmp_path: Path) -> tuple[Path, str, list[str] | None]:
    path = tmp_path / f"{case}.gguf"
    if case == "symlink-loop":
        (tmp_path / "other.gguf").symlink_to(path)
        path.symlink_to(tmp_path / "other.gguf")
        return path, "is a symlink loop", []
    if case == "dangling-symlink":
        path.symlink_to(tmp_path / "deleted.gguf")
        return path, "is a symlink to", []
    if case == "directory":
        path.mkdir()
        return path, "is a directory", []
    if case == "fifo":
        os.mkfifo(path)  # an open would wait for a writer forever
        return path, "is not a regular file", []
    path.write_bytes(b"GGUF" + bytes(60))  # never read: the open fails first
    return path, "permission denied", _unreadable(path)


CASES = ["symlink-loop", "dangling-symlink", "directory", "fifo", "unreadable"]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tandem-home")


def _tandem(prefix: list[str], home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_HOME=str(home))
    return subprocess.run([*prefix, sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          timeout=LIMIT_S, env=env, cwd=ROOT)


def _one_line(result: subprocess.CompletedProcess, name: str, needle: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(errors) == 1, result.stderr
    assert f"{name}: " in errors[0] and needle in errors[0], errors[0]


@pytest.mark.parametrize("case", CASES)
def test_generate_says_what_is_wrong_with_the_path_in_one_line(case, tmp_path, home):
    path, needle, prefix = _make(case, tmp_path)
    if prefix is None:
        pytest.skip("no way to make a file unreadable here")
    result = _tandem(prefix, home, "generate", "--target", str(path), "--prompt", "hi", "--max-tokens", "2",
                     "--no-speculation")
    _one_line(result, path.name, needle)


@pytest.mark.parametrize("case", CASES)
def test_check_pair_says_what_is_wrong_with_either_path_in_one_line(case, tmp_path, home, demo_models):
    path, needle, prefix = _make(case, tmp_path)
    if prefix is None:
        pytest.skip("no way to make a file unreadable here")
    _one_line(_tandem(prefix, home, "check-pair", str(path), str(demo_models.draft)), path.name, needle)
    _one_line(_tandem(prefix, home, "check-pair", str(demo_models.target), str(path)), path.name, needle)
