"""``tandem serve`` loads with GPU layers 'auto' (the default), with no GPU and with a
simulated one (TANDEM_GPU_MEMORY), says the plan in its ready line and in /health, and
answers on the planned split."""

from __future__ import annotations

import httpx
import pytest

from .live_server import LiveServer


@pytest.mark.parametrize(("gpu_memory", "said"), [("", "runs on the CPU"),
                                                  ("600MiB", "target layers on the GPU; the draft wholly")])
def test_serve_plans_its_gpu_layers(demo_models, monkeypatch, gpu_memory, said):
    monkeypatch.setenv("TANDEM_GPU_MEMORY", gpu_memory)
    server = LiveServer("--n-ctx", "1024")
    try:
        ready = next(line for line in server.lines if line.startswith("Ready:"))
        assert "memory: " in ready and said in ready
        memory = httpx.get(server.url + "/health").json()["memory"]
        assert said in memory["plan"] and memory["allocated_bytes"] > 0
        target_layers, draft_layers = memory["gpu_layers"]
        if gpu_memory:
            assert draft_layers == 31 and 0 < target_layers <= 30 and 0 < memory["planned_gpu_bytes"] <= 600 << 20
        else:
            assert (target_layers, draft_layers) == (0, 0) and memory["planned_gpu_bytes"] == 0
        reply = httpx.post(server.base_url + "/completions", timeout=300,
                           json={"model": "any", "prompt": "One, two,", "max_tokens": 4, "temperature": 0}).json()
        assert reply["choices"][0]["text"]
    finally:
        assert server.stop() == 0
    assert not any("Traceback" in line for line in server.stderr), "".join(server.stderr)
