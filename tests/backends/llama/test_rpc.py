"""The target split over llama.cpp RPC workers, the draft local: real ``tandem worker``
processes on 127.0.0.1, the real demo pair, the real engine process.

ggml aborts the process that holds a connection to a worker that goes away, so every
load over workers here runs in an engine process (the chat's own path) or a ``tandem``
command, never in the test process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backends.llama import rpc
from app.engine.types import SamplingConfig, SpecConfig
from app.session.config import ModelSpec
from app.session.engine_session import EngineDied, EngineSession

from rpc_workers import Worker, free_port, one_error_line, tandem, tandem_env, workers

needs_rpc = pytest.mark.skipif(not rpc.available(), reason="this llama.cpp build has no RPC backend")

PROMPT = (("user", "Write a Python function that reverses a linked list."),)
GREEDY = SamplingConfig(temperature=0.0, ignore_eos=True)


def reply_ids(engine: EngineSession, spec: SpecConfig, max_tokens: int = 48) -> list[int]:
    return [e.id for e in engine.reply(PROMPT, GREEDY, spec, max_tokens)]


@pytest.fixture(scope="module")
def two_workers():
    with workers(2) as started:
        yield started


# -- a worker that cannot be used: one line, before anything loads ---------------------------

@needs_rpc
def test_a_worker_that_is_not_there_is_one_line(tmp_path):
    port = free_port()
    done = tandem("generate", "-p", "Hi", "--max-tokens", "4", "--rpc", f"127.0.0.1:{port}", home=tmp_path)
    line = one_error_line(done)
    assert line == (f"tandem: error: worker 127.0.0.1:{port} is not there (connection refused); "
                    f"start it with 'tandem worker --port {port}' on that machine")


def test_a_bad_worker_list_is_a_usage_error(tmp_path):
    done = tandem("generate", "-p", "Hi", "--rpc", "127.0.0.1", home=tmp_path)
    assert done.returncode == 2 and "must be written host:port" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@needs_rpc
def test_more_split_shares_than_devices_is_one_line(two_workers, tmp_path):
    endpoints = ",".join(w.endpoint for w in two_workers)
    done = tandem("generate", "-p", "Hi", "--max-tokens", "4", "--rpc", endpoints, "--tensor-split", "1,1,1",
                  home=tmp_path)
    assert "the tensor split has 3 shares for 2 devices" in one_error_line(done)


# -- the split itself ------------------------------------------------------------------------

@needs_rpc
def test_a_reply_split_over_two_workers_is_the_local_one_plain_and_speculative(two_workers, demo_models, tmp_path):
    pair = dict(target_path=str(demo_models.target), draft_path=str(demo_models.draft), n_ctx=1024, n_threads=1)
    env = tandem_env(TANDEM_HOME=str(tmp_path / "home"))
    plain, speculative = SpecConfig(enabled=False), SpecConfig(draft_max=5)
    local = EngineSession(env=env)
    try:
        local.load(ModelSpec(**pair))
        expected = {"plain": reply_ids(local, plain), "speculative": reply_ids(local, speculative)}
    finally:
        local.close()
    split = EngineSession(env=env)
    try:
        info = split.load(ModelSpec(**pair, rpc_workers=tuple(w.endpoint for w in two_workers), tensor_split=(1, 3)))
        assert info.workers == tuple(w.endpoint for w in two_workers) and info.draft_name
        assert reply_ids(split, plain) == expected["plain"]
        assert reply_ids(split, speculative) == expected["speculative"]
        assert split.stats.speculative and split.stats.accepted > 0  # the local draft did draft
    finally:
        split.close()
    assert expected["plain"] == expected["speculative"]  # lossless, as everywhere


@needs_rpc
def test_a_worker_killed_mid_reply_ends_the_engine_in_one_line_and_a_restart_works(demo_models, tmp_path):
    pair = dict(target_path=str(demo_models.target), draft_path=str(demo_models.draft), n_ctx=1024, n_threads=1)
    worker = Worker(free_port())
    engine = EngineSession(env=tandem_env(TANDEM_HOME=str(tmp_path / "home")))
    try:
        worker.wait_ready()
        engine.load(ModelSpec(**pair, rpc_workers=(worker.endpoint,)))
        shown: list[int] = []
        with pytest.raises(EngineDied) as died:
            # The reply in flight, or else the next one: the engine's first step after the
            # kill needs the worker, however far the reply had got by then.
            for _ in range(2):
                for event in engine.reply(PROMPT, GREEDY, SpecConfig(draft_max=5), 200):
                    shown.append(event.id)
                    worker.kill()
        assert shown  # what came before the death was seen (the front ends keep it)
        line = str(died.value)
        assert "\n" not in line and line.startswith("The engine crashed (SIGABRT"), line
        assert "RPC" in line, line  # ggml's own words: the remote end went away
        engine.restart()
        engine.load(ModelSpec(**pair))  # without the worker, here
        assert reply_ids(engine, SpecConfig(draft_max=5), 8)
    finally:
        engine.close()
        worker.kill()


@needs_rpc
def test_a_worker_too_small_for_its_share_is_one_line(demo_models, tmp_path):
    """The worker's address space capped just above what it uses idle: it cannot allocate
    the target's weights, and llama.cpp's refusal comes back naming the worker."""
    worker = Worker(free_port())
    try:
        worker.wait_ready()
        size = _vm_size(worker.process.pid)
        import resource

        resource.prlimit(worker.process.pid, resource.RLIMIT_AS, (size + (64 << 20), size + (64 << 20)))
        done = tandem("-m", str(demo_models.target), "-md", str(demo_models.draft), "generate", "-p", "Hi",
                      "--max-tokens", "4", "--rpc", worker.endpoint, home=tmp_path)
        line = one_error_line(done)
        assert f"worker {worker.endpoint} could not hold its share of the target" in line, line
        assert "--tensor-split" in line
    finally:
        worker.kill()


def _vm_size(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


def test_rpc_and_tensor_split_reach_the_target_on_every_command():
    """--rpc and --tensor-split (-ts, llama.cpp's names) on generate, chat, bench and serve,
    before or after the command, become the target's load; the draft has no such field."""
    from app.cli.main import build_parser
    from app.terminal.shared import model_spec

    parser = build_parser()
    workers_given = ["--rpc", "10.0.0.2:50052,box:7", "-ts", "3,1"]
    for command in (["generate", "-p", "hi"], ["chat"], ["bench"], ["serve"]):
        for argv in (command + workers_given, workers_given + command):
            spec = model_spec(parser.parse_args(argv))
            assert spec.rpc_workers == ("10.0.0.2:50052", "box:7") and spec.tensor_split == (3.0, 1.0), argv
    assert model_spec(parser.parse_args(["chat"])).rpc_workers == ()


@pytest.mark.parametrize("text, words", [
    ("127.0.0.1", "must be written host:port"), ("[::1]:50052", "not IPv6"), ("h:0", "from 1 to 65535"),
    ("h:x", "from 1 to 65535"), ("h:1,h:1", "listed twice"), (",".join(f"h:{i}" for i in range(1, 18)), "at most 16"),
])
def test_a_worker_list_that_cannot_be_used_says_why(text, words):
    from app.worker_address import AddressError, parse_workers

    with pytest.raises(AddressError, match=words):
        parse_workers(text)


def test_a_split_reads_as_llama_cpp_writes_it():
    from app.worker_address import AddressError, parse_split

    assert parse_split("3,1") == parse_split("3/1") == (3.0, 1.0) and parse_split("") == ()
    for bad, words in (("1,x", "numbers separated"), ("1,-1", "0 or more"), ("0,0", "nothing"), ("nan", "0 or more")):
        with pytest.raises(AddressError, match=words):
            parse_split(bad)
