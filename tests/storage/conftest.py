from __future__ import annotations

import pytest

CRASH_REPORT = pytest.StashKey[list]()


@pytest.fixture(autouse=True)
def tandem_home(tmp_path, monkeypatch):
    """Every path from app.storage.paths lands under this test's tmp_path."""
    home = tmp_path / "tandem-home"
    monkeypatch.setenv("TANDEM_HOME", str(home))
    return home


def pytest_terminal_summary(terminalreporter, config):
    # The crash test's measured loss belongs in every run's output, not only with -s.
    for line in config.stash.get(CRASH_REPORT, []):
        terminalreporter.write_line(line)
