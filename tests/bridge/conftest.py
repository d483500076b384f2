"""Tests of app/bridge (the engine client, a window or two among them) run without a display, and never touch the user's own settings or history:
the fixtures of tests/window_fixtures.py, for every test in this folder."""

from window_fixtures import make_window, tandem_home  # noqa: F401  (fixtures; tandem_home is autouse)
