"""Library tests describe the machine they scan: Tandem's own folders (``TANDEM_HOME``)
land under the test's tmp_path, never the user's cache with its demo pair."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def tandem_home(tmp_path, monkeypatch):
    home = tmp_path / "tandem-home"
    monkeypatch.setenv("TANDEM_HOME", str(home))
    return home
