"""A live ``tandem serve`` on the demo pair: started by the test as a child process on
a free port of 127.0.0.1 (``--port 0``; the address is read from its ready line),
stopped with Ctrl+C (SIGINT) afterwards, which must end it cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY_SECONDS = 300  # loading on a shared, slow machine
# The tests compare replies token for token, so the server decodes greedily unless a test
# says otherwise (its defaults are the window's, sampled at temperature 0.8).
GREEDY = ("--temperature", "0")
ADDRESS = re.compile(r"Tandem API: (http://\S+)/v1")


def tandem(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


class LiveServer:
    def __init__(self, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", "0", *GREEDY, *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.stderr.extend(self.process.stderr), daemon=True).start()
        self.lines: list[str] = []
        self.url = self._wait_for_address()

    def _wait_for_address(self) -> str:
        found: list[str] = []
        done = threading.Event()

        def read() -> None:
            for line in self.process.stdout:
                self.lines.append(line)
                match = ADDRESS.search(line)
                if match and not found:
                    found.append(match.group(1))
                if line.startswith("Ready:"):
                    done.set()
            done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(READY_SECONDS) or not found:
            self.process.kill()
            raise AssertionError(f"tandem serve did not start: {self.lines} {self.stderr}")
        return found[0]

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(60)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def serving(*args: str):
    """A module fixture's body: ``tandem serve`` with ``args`` while the module's tests
    run, then stopped, which must end cleanly and without a traceback."""
    server = LiveServer(*args)
    yield server
    assert server.stop() == 0
    assert not any("Traceback" in line for line in server.stderr), "".join(server.stderr)
