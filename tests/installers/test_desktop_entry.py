"""The user-level .desktop installer, run for real against a throw-away HOME."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINUX = ROOT / "installers" / "linux"
SIZES = (16, 32, 48, 64, 128, 256, 512)

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def installed_paths(data_home: Path) -> list[Path]:
    icons = data_home / "icons" / "hicolor"
    return [
        data_home / "applications" / "tandem.desktop",
        icons / "scalable" / "apps" / "tandem.svg",
        *(icons / f"{n}x{n}" / "apps" / "tandem.png" for n in SIZES),
    ]


def make_launcher(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    launcher = directory / "tandem"
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    return launcher


def run(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=30
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {
        "HOME": str(home),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PATH": "/usr/bin:/bin",
    }


def desktop_entry(data_home: Path) -> dict[str, str]:
    lines = (data_home / "applications" / "tandem.desktop").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def unescape_exec_argument(value: str) -> str:
    """Undo the Desktop Entry spec's escaping for an Exec= holding one quoted argument."""
    string_escapes = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    out, chars = [], iter(value)
    for c in chars:
        out.append(string_escapes.get(next(chars), "") if c == "\\" else c)
    value = "".join(out).replace("%%", "%")
    assert value[0] == value[-1] == '"', value
    out, chars = [], iter(value[1:-1])
    for c in chars:
        out.append(next(chars) if c == "\\" else c)
    return "".join(out)


def test_install_then_uninstall_leaves_nothing_of_ours(tmp_path, env):
    data_home = Path(env["XDG_DATA_HOME"])
    launcher = make_launcher(tmp_path / "bin dir")
    neighbour = data_home / "applications" / "other.desktop"
    neighbour.parent.mkdir(parents=True)
    neighbour.write_text("[Desktop Entry]\n")

    result = run(LINUX / "install_desktop_entry.sh", str(launcher), env=env)
    assert result.returncode == 0, result.stderr
    for path in installed_paths(data_home):
        assert path.is_file(), path
    png = data_home / "icons/hicolor/48x48/apps/tandem.png"
    assert png.read_bytes() == (ROOT / "app/resources/icons/tandem-48.png").read_bytes()
    entry = desktop_entry(data_home)
    assert unescape_exec_argument(entry["Exec"]) == str(launcher)
    assert entry["TryExec"] == str(launcher)
    assert entry["Icon"] == "tandem"

    result = run(LINUX / "uninstall_desktop_entry.sh", env=env)
    assert result.returncode == 0, result.stderr
    assert not any(path.exists() for path in installed_paths(data_home))
    assert neighbour.exists(), "uninstall must remove only what install wrote"


def test_installing_twice_is_harmless(tmp_path, env):
    launcher = make_launcher(tmp_path / "bin")
    for _ in range(2):
        assert run(LINUX / "install_desktop_entry.sh", str(launcher), env=env).returncode == 0
    assert run(LINUX / "uninstall_desktop_entry.sh", env=env).returncode == 0
    assert run(LINUX / "uninstall_desktop_entry.sh", env=env).returncode == 0


def test_without_xdg_data_home_it_uses_home_local_share(tmp_path, env):
    del env["XDG_DATA_HOME"]
    data_home = Path(env["HOME"]) / ".local" / "share"
    launcher = make_launcher(tmp_path / "bin")

    assert run(LINUX / "install_desktop_entry.sh", str(launcher), env=env).returncode == 0
    assert all(path.is_file() for path in installed_paths(data_home))
    assert run(LINUX / "uninstall_desktop_entry.sh", env=env).returncode == 0
    assert not any(path.exists() for path in installed_paths(data_home))


@pytest.mark.parametrize("name", ["plain", "we ird $HOME \"q\" `b` & 100% back\\slash"])
def test_exec_survives_awkward_paths(tmp_path, env, name):
    launcher = make_launcher(tmp_path / name)
    result = run(LINUX / "install_desktop_entry.sh", str(launcher), env=env)
    assert result.returncode == 0, result.stderr
    assert unescape_exec_argument(desktop_entry(Path(env["XDG_DATA_HOME"]))["Exec"]) == str(launcher)


def copy_repo_layout(tmp_path: Path) -> Path:
    """The installer finds its resources relative to itself; give it a repo of its own."""
    repo = tmp_path / "repo"
    shutil.copytree(LINUX, repo / "installers" / "linux")
    shutil.copytree(ROOT / "app" / "resources", repo / "app" / "resources")
    return repo


def test_launcher_defaults_to_the_repo_venv(tmp_path, env):
    repo = copy_repo_layout(tmp_path)
    launcher = make_launcher(repo / ".venv" / "bin")
    result = run(repo / "installers/linux/install_desktop_entry.sh", env=env)
    assert result.returncode == 0, result.stderr
    assert unescape_exec_argument(desktop_entry(Path(env["XDG_DATA_HOME"]))["Exec"]) == str(launcher)


def test_launcher_falls_back_to_path(tmp_path, env):
    repo = copy_repo_layout(tmp_path)
    launcher = make_launcher(tmp_path / "on-path")
    env["PATH"] = f"{launcher.parent}:{env['PATH']}"
    result = run(repo / "installers/linux/install_desktop_entry.sh", env=env)
    assert result.returncode == 0, result.stderr
    assert desktop_entry(Path(env["XDG_DATA_HOME"]))["TryExec"] == str(launcher)


def test_no_launcher_fails_before_writing_anything(tmp_path, env):
    repo = copy_repo_layout(tmp_path)
    result = run(repo / "installers/linux/install_desktop_entry.sh", env=env)
    assert result.returncode != 0
    assert "No tandem launcher" in result.stderr
    assert not Path(env["XDG_DATA_HOME"]).exists()


def test_missing_icons_fail_before_writing_anything(tmp_path, env):
    repo = copy_repo_layout(tmp_path)
    (repo / "app/resources/icons/tandem-512.png").unlink()
    launcher = make_launcher(tmp_path / "bin")
    result = run(repo / "installers/linux/install_desktop_entry.sh", str(launcher), env=env)
    assert result.returncode != 0
    assert "tandem-512.png" in result.stderr
    assert not Path(env["XDG_DATA_HOME"]).exists()


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
@pytest.mark.parametrize("name", ["bin", "we ird $HOME \"q\" `b` & 100% back\\slash"])
def test_entry_passes_desktop_file_validate(tmp_path, env, name):
    launcher = make_launcher(tmp_path / name)
    assert run(LINUX / "install_desktop_entry.sh", str(launcher), env=env).returncode == 0
    entry = Path(env["XDG_DATA_HOME"]) / "applications" / "tandem.desktop"
    result = subprocess.run(
        ["desktop-file-validate", str(entry)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_scripts_are_executable():
    for name in ("install_desktop_entry.sh", "uninstall_desktop_entry.sh"):
        assert os.access(LINUX / name, os.X_OK), name
