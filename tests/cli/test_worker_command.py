"""``tandem worker``: a real llama.cpp RPC worker process on 127.0.0.1, from this build.
It says where it is and what it serves, refuses an address other machines can reach
unless told, and Tandem's hello tells each way a worker cannot be used in one line."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from app.backends.llama import rpc

from rpc_workers import Worker, free_port, one_error_line, tandem, workers

pytestmark = pytest.mark.skipif(not rpc.available(), reason="this llama.cpp build has no RPC backend")


@pytest.fixture(scope="module")
def two_workers():
    with workers(2) as started:
        yield started


def test_a_worker_says_its_address_device_and_memory_and_speaks_this_builds_protocol(two_workers):
    worker = two_workers[0]
    banner = "\n".join(worker.banner)
    assert f"on {worker.endpoint}" in banner and f"RPC {'.'.join(map(str, rpc.PROTOCOL))}" in banner
    device = next(line for line in worker.banner if line.strip().startswith("device:"))
    assert "CPU" in device and " free of " in device and "1 threads" in device
    # The version Tandem compares against is the one this build's worker answers with.
    assert rpc.check_worker(worker.endpoint) == rpc.PROTOCOL


def test_a_non_loopback_bind_is_refused_without_the_flag(tmp_path):
    done = tandem("worker", "--host", "0.0.0.0", "--port", str(free_port()), home=tmp_path)
    assert done.returncode == 2
    line = one_error_line(done)
    assert "--allow-remote" in line and "no password" in line


def test_a_non_loopback_bind_with_the_flag_warns_that_anyone_can_use_it():
    worker = Worker(free_port(), extra=("--host", "0.0.0.0", "--allow-remote"))
    try:
        worker.wait_ready()
        warning = [line for line in worker.banner if line.startswith("tandem: warning:")]
        assert len(warning) == 1 and "anyone who can reach port" in warning[0]
    finally:
        worker.kill()


def test_a_port_in_use_is_one_line(two_workers, tmp_path):
    done = tandem("worker", "--port", str(two_workers[0].port), home=tmp_path)
    assert done.returncode == 2
    assert "cannot listen on 127.0.0.1" in one_error_line(done)


def _old_worker(version: tuple[int, int, int]):
    """A listener that answers the hello as a worker of another protocol version would
    (no other llama.cpp build is here to run as one)."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer():
        conn, _ = server.accept()
        with conn:
            conn.recv(1 + 8 + rpc.CONN_CAPS, socket.MSG_WAITALL)
            conn.sendall(struct.pack("<Q", 4 + rpc.CONN_CAPS) + bytes([*version, 0]) + bytes(rpc.CONN_CAPS))
            conn.recv(1)  # until the client hangs up

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return server, thread


def test_a_worker_of_another_protocol_version_is_one_line():
    server, thread = _old_worker((6, 1, 0))
    with server:
        endpoint = f"127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(rpc.WorkerError) as caught:
            rpc.check_worker(endpoint)
        thread.join(30)
    assert str(caught.value) == (f"worker {endpoint} speaks RPC protocol 6.1.0, this Tandem's llama.cpp speaks "
                                 f"{'.'.join(map(str, rpc.PROTOCOL))}; run the same llama.cpp version on both")


def test_a_worker_busy_with_another_client_is_one_line(two_workers):
    worker = two_workers[1]
    other = socket.create_connection(("127.0.0.1", worker.port))  # another client, holding the worker
    try:
        other.sendall(struct.pack("<BQ", rpc.HELLO, rpc.CONN_CAPS) + bytes(rpc.CONN_CAPS))
        other.recv(8 + 4 + rpc.CONN_CAPS, socket.MSG_WAITALL)
        with pytest.raises(rpc.WorkerError, match="serves one client at a time"):
            rpc.check_worker(worker.endpoint, timeout=2)  # it cannot answer until the other leaves
    finally:
        other.close()
    assert rpc.check_worker(worker.endpoint) == rpc.PROTOCOL  # free again once the other left
