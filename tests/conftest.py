"""Shared fixtures: the real demo models, provisioned once into the user cache."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session")
def demo_models():
    """Paths of the demo pair and the strict (Q4_0) draft, provisioned on first use."""
    from app.models.demo import demo_pair

    return demo_pair(strict=True)


def _load(path, n_ctx=2048):
    from app.backends.llama_cpp_backend import LlamaBackend

    return LlamaBackend(path, n_ctx=n_ctx, n_threads=0)


@pytest.fixture(scope="session")
def q41_target(demo_models):
    """The Q4_1 model as a *target*: batched and single-token logits are bit-identical on CPU."""
    model = _load(demo_models.draft)
    yield model
    model.close()


@pytest.fixture(scope="session")
def q40_draft(demo_models):
    model = _load(demo_models.strict_draft)
    yield model
    model.close()


@pytest.fixture(scope="session")
def f32_target(demo_models):
    model = _load(demo_models.target)
    yield model
    model.close()


@pytest.fixture(scope="session")
def q41_draft(demo_models):
    """A second, independent copy of the Q4_1 model, for drafting."""
    model = _load(demo_models.draft)
    yield model
    model.close()
