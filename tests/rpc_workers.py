"""Real ``tandem worker`` processes on 127.0.0.1 for the RPC tests: started on a free
port, ready once they answer the protocol's hello, stopped after."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_WITHIN_S = 120.0  # a deadline for a start that went wrong, never a speed expected


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tandem_env(**extra: str) -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), **extra)


class Worker:
    def __init__(self, port: int, threads: int = 1, extra: tuple[str, ...] = ()) -> None:
        self.port = port
        self.endpoint = f"127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", "worker", "--port", str(port), "--threads", str(threads), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=tandem_env(), cwd=ROOT)
        self.banner: list[str] = []

    def wait_ready(self) -> None:
        """Read the banner, then wait until the worker answers a hello (its port is bound
        after the banner is printed)."""
        from app.backends.llama import rpc

        for line in self.process.stdout:
            self.banner.append(line.rstrip("\n"))
            if line.lstrip().startswith("use it:"):
                break
        else:
            raise AssertionError(f"the worker ended before it started: {self.banner}")
        deadline = time.monotonic() + READY_WITHIN_S
        while True:
            try:
                rpc.hello(self.endpoint, timeout=READY_WITHIN_S)
                return
            except rpc.WorkerError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)
        if self.process.stdout:
            self.process.stdout.close()


def tandem(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout,
                          env=tandem_env(TANDEM_HOME=str(home)), cwd=ROOT)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


@contextmanager
def workers(n: int, threads: int = 1):
    started = [Worker(free_port(), threads) for _ in range(n)]
    try:
        for worker in started:
            worker.wait_ready()
        yield started
    finally:
        for worker in started:
            worker.kill()
