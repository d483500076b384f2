"""A local Hub serving the demo files, and an isolated Hugging Face cache per test."""

from __future__ import annotations

import pytest

from hub.fake_hub import FakeHub

DEMO_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
TARGET = "SmolLM2-135M-Instruct.F32.gguf"
DRAFT = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def hub(demo_models, monkeypatch, tmp_path):
    """The demo pair on a local Hub (HF_ENDPOINT), an empty cache (HF_HOME), a token set
    (HF_TOKEN) that must never reach the CDN."""
    fake = FakeHub()
    fake.add(DEMO_REPO, {}, downloads=1000)
    fake.add_file(DEMO_REPO, TARGET, demo_models.target)
    fake.add_file(DEMO_REPO, DRAFT, demo_models.draft)
    fake.start()
    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token_for_tests")
    yield fake
    fake.stop()
    assert not fake.token_leaks, f"the token went to the CDN: {fake.token_leaks}"
