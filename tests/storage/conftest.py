from __future__ import annotations

import pytest

_CRASH_REPORT = pytest.StashKey[list]()


@pytest.fixture(autouse=True)
def tandem_home(tmp_path, monkeypatch):
    """Every path from app.storage.paths lands under this test's tmp_path."""
    home = tmp_path / "tandem-home"
    monkeypatch.setenv("TANDEM_HOME", str(home))
    return home


@pytest.fixture
def crash_report(request) -> list[str]:
    """Lines for the end-of-run summary: the crash test's measured loss shows in every run."""
    return request.config.stash.setdefault(_CRASH_REPORT, [])


def pytest_terminal_summary(terminalreporter, config):
    for line in config.stash.get(_CRASH_REPORT, []):
        terminalreporter.write_line(line)
