"""What Settings' Test asks a worker (app/worker_hello.py), against a real ``tandem
worker`` on 127.0.0.1: its protocol version, its devices' memory, and the hello's round
trip; a port with nothing on it is one line."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from app import worker_hello
from app.backends.llama import rpc

from rpc_workers import free_port, workers

pytestmark = pytest.mark.skipif(not rpc.available(), reason="this llama.cpp build has no RPC backend")


def test_a_live_worker_says_its_version_its_devices_memory_and_the_hellos_round_trip():
    with workers(1) as (worker,):
        report = worker_hello.probe(worker.endpoint)
        assert report.version == rpc.PROTOCOL
        assert len(report.memory) == 1  # a CPU worker serves its CPU only
        free, total = report.memory[0]
        assert 0 < free <= total
        assert report.hello_seconds > 0
        line = report.line()
        assert "\n" not in line
        assert line.startswith(f"{worker.endpoint}: RPC {'.'.join(map(str, rpc.PROTOCOL))}, 1 device, ")
        assert " free of " in line and line.endswith(" ms") and "hello " in line
        # The banner's total is the same device's: the two agree on the machine's memory.
        banner = next(b for b in worker.banner if "device:" in b)
        assert f"free of {worker_hello.gib(total)}" in banner
        # The probe let go of the worker: it serves the next client.
        assert rpc.check_worker(worker.endpoint) == rpc.PROTOCOL


def test_a_closed_port_is_one_line():
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(worker_hello.WorkerError) as caught:
        worker_hello.probe(endpoint)
    assert str(caught.value).startswith(f"worker {endpoint} is not there (connection refused)")
    assert "\n" not in str(caught.value)


def test_a_worker_of_another_version_is_asked_nothing_past_the_hello():
    server = socket.create_server(("127.0.0.1", 0))
    after_hello: list[bytes] = []

    def answer():
        conn, _ = server.accept()
        with conn:
            conn.recv(1 + 8 + worker_hello.CONN_CAPS, socket.MSG_WAITALL)
            conn.sendall(struct.pack("<Q", 4 + worker_hello.CONN_CAPS) + bytes([8, 0, 0, 0])
                         + bytes(worker_hello.CONN_CAPS))
            after_hello.append(conn.recv(64))  # b'' once the client hangs up without a command

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    with server:
        endpoint = f"127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(worker_hello.WorkerError, match="speaks RPC protocol 8.0.0"):
            worker_hello.probe(endpoint)
        thread.join(30)
    assert after_hello == [b""]
