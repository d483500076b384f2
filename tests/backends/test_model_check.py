"""The trial load in a child: real llama.cpp deaths become one line; passes are remembered."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hostile_models import CASES, write_model

from app.backends.model_check import check_model, last_words, run_trial_child
from app.engine.errors import ModelFileError


@pytest.fixture
def home(tmp_path, monkeypatch):
    """Caches (trial passes, the build probe's) in this test's folder, not the user's."""
    home = tmp_path / "home"
    monkeypatch.setenv("TANDEM_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("honest") / "honest.gguf")


@pytest.fixture(scope="module")
def crashing(tmp_path_factory) -> Path:
    """Passes the validator; llama.cpp aborts on the first text it tokenizes."""
    spec, _ = CASES["t5-charsmap-out-of-bounds"]
    return write_model(tmp_path_factory.mktemp("crashing") / "crashing.gguf", spec)


def test_a_pass_is_remembered_by_path_size_and_mtime(home, honest, tmp_path):
    first = check_model(honest, cache_dir=tmp_path)
    assert first.ok and not first.cached
    second = check_model(honest, cache_dir=tmp_path)
    assert second.ok and second.cached
    assert second.seconds < first.seconds
    stat = honest.stat()
    os.utime(honest, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # "replaced"
    third = check_model(honest, cache_dir=tmp_path)
    assert third.ok and not third.cached
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(honest.read_bytes())
    assert not check_model(copy, cache_dir=tmp_path).cached  # another path is another file


def test_a_death_is_one_line_naming_the_file_and_never_remembered(home, crashing, tmp_path):
    for _ in range(2):
        check = check_model(crashing, cache_dir=tmp_path)
        assert not check.ok and not check.cached
        assert check.message == ("crashing.gguf: llama.cpp crashed on it in a trial load (SIGABRT: uncaught "
                                 "std::runtime_error (Index out of array bounds in XCDA array!))")
        assert "\n" not in check.message


def test_non_finite_logits_fail_the_trial(home, tmp_path):
    spec, _ = CASES["rope-freq-base-nan"]
    check = check_model(write_model(tmp_path / "nan.gguf", spec), cache_dir=tmp_path)
    assert not check.ok
    assert check.message == "nan.gguf: llama.cpp computed non-finite logits (NaN or infinity) for it"


def test_llama_cpps_own_refusal_comes_through(home, tmp_path):
    spec, _ = CASES["block-count-0"]
    bad = write_model(tmp_path / "bad.gguf", spec)
    with pytest.raises(ModelFileError, match=r"^bad\.gguf: 'llama\.block_count' is 0"):
        check_model(bad, cache_dir=tmp_path)  # the validator, before any child


def _child_trial(tmp_path: Path, body: str) -> dict:
    """The environment of a trial child whose ``run_trial`` is replaced by ``body`` (the
    child imports this ``sitecustomize`` first), so a test decides what the trial does
    instead of racing a real load against the clock."""
    (tmp_path / "sitecustomize.py").write_text(
        "import app.backends.model_trial as m\n"
        "def run_trial(path):\n" + "".join(f"    {line}\n" for line in body.splitlines()) +
        "m.run_trial = run_trial\n")
    return dict(os.environ, PYTHONPATH=str(tmp_path))


def test_a_trial_past_its_time_is_stopped(honest, tmp_path):
    """The trial reports that it is loading, then blocks until it is killed: only the
    timeout can end it, on a machine of any speed (a real load of the tiny test model
    takes ~0.2 s on a fast CPU, which once beat a 0.2 s limit)."""
    blocked = _child_trial(tmp_path, 'm._emit({"stage": "loading", "fraction": 0.0})\n'
                                     'import threading\nthreading.Event().wait()')
    started = time.perf_counter()
    outcome = run_trial_child(honest, timeout=0.5, env=blocked)
    assert not outcome.ok and outcome.detail.startswith("a trial load did not finish in 0 s")
    assert not outcome.cancelled and outcome.returncode is not None and outcome.returncode < 0  # killed
    assert time.perf_counter() - started < 30  # a hang guard: it is stopped, not waited for


def test_an_instant_trial_is_not_taken_for_a_timeout(honest, tmp_path):
    """The other side of the test above: the same child whose trial ends at once passes
    under a limit it cannot reach, so it is the blocking, not the clock, that the
    timeout catches."""
    instant = _child_trial(tmp_path, 'return {"stage": "done", "ok": True, "seconds": 0.0}')
    outcome = run_trial_child(honest, timeout=60, env=instant)
    assert outcome.ok, outcome.detail
    assert outcome.records[-1] == {"stage": "done", "ok": True, "seconds": 0.0}


def test_a_hang_is_stopped_when_the_child_goes_quiet(tmp_path):
    """RWKV's tokenizer loops forever on this vocabulary (a real llama.cpp hang, filling
    memory as it goes). The validator refuses the file, so the child's copy of it is
    switched off here: the stall limit alone must end the trial, naming the step."""
    spec, _ = CASES["rwkv-prefix-without-token"]
    path = write_model(tmp_path / "rwkv.gguf", spec)
    (tmp_path / "sitecustomize.py").write_text(
        "import app.engine.gguf.header as m\nm.first_violation = lambda values, alignment: None\n")
    started = time.perf_counter()
    # The stall limit is generous against the child's start (Python, llama.cpp's import,
    # the tiny load): the hang itself never ends, so only a slow start could race it.
    outcome = run_trial_child(path, quiet=8.0, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert not outcome.ok
    assert outcome.detail.startswith("llama.cpp hung on it in a trial load (no progress for 8 s while tokenizing)")
    assert time.perf_counter() - started < 60


def test_a_cancelled_trial_stops_at_once(honest, tmp_path):
    blocked = _child_trial(tmp_path, 'import threading\nthreading.Event().wait()')  # only Cancel ends it
    started = time.perf_counter()
    outcome = run_trial_child(honest, progress=lambda fraction: False, env=blocked)
    assert outcome.cancelled and not outcome.ok
    assert time.perf_counter() - started < 15  # a hang guard


def test_progress_reaches_the_parent(honest):
    seen = []
    outcome = run_trial_child(honest, progress=seen.append)
    assert outcome.ok
    assert seen and max(seen) == 1.0 and all(0.0 <= f <= 1.0 for f in seen)


@pytest.mark.parametrize(("stderr", "words"), [
    (["llama_model_load: warning", "/tmp/pip-req-build-x/vendor/llama.cpp/src/llama-vocab.cpp:2544: "
      "GGML_ASSERT(id_to_token.size() == token_to_id.size()) failed"],
     "llama-vocab.cpp:2544: GGML_ASSERT(id_to_token.size() == token_to_id.size()) failed"),
    (["terminate called after throwing an instance of 'std::out_of_range'", "  what():  unordered_map::at"],
     "uncaught std::out_of_range (unordered_map::at)"),
    (["C:\\src\\llama.cpp\\src\\llama-vocab.cpp:3207: fatal error"], "llama-vocab.cpp:3207: fatal error"),
    (["something", "#0 0x1234 in frame"], "something"),
    ([], ""),
])
def test_last_words(stderr, words):
    assert last_words(stderr) == words


def test_load_pair_refuses_a_file_that_kills_llama_cpp(home, crashing):
    """The real loading path: the file never reaches llama.cpp in this process."""
    from app.backends.loader import load_pair

    with pytest.raises(ModelFileError, match=r"^crashing\.gguf: llama\.cpp crashed on it in a trial load \(SIGABRT"):
        load_pair(crashing, drafter="none", n_ctx=64)


def test_load_pair_reports_the_trial_then_the_load(home, honest):
    from app.backends.loader import load_pair

    seen: list[tuple[str, float]] = []
    pair = load_pair(honest, drafter="none", n_ctx=64, progress=lambda what, f: seen.append((what, f)))
    pair.close()
    fractions = [f for what, f in seen if what == "target"]
    # One bar: the trial fills its first half, the load the second.
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and 0.5 in fractions
    trial_part = [f for f in fractions if f < 0.5]
    seen.clear()
    load_pair(honest, drafter="none", n_ctx=64, progress=lambda what, f: seen.append((what, f))).close()
    cached = [f for _, f in seen]
    # Remembered: no trial, the load alone fills the bar, from 0.
    assert cached == sorted(cached) and cached[0] == 0.0 and cached[-1] == 1.0
    assert len(cached) < len(fractions) and trial_part


def test_check_pair_says_compatible_only_after_both_trials(home, honest, crashing, tmp_path):
    from app.backends.loader import check_pair

    assert check_pair(honest, honest).ok
    spec, _ = CASES["rope-freq-base-nan"]
    nan = write_model(tmp_path / "nan-draft.gguf", spec)  # same vocabulary: compatible on paper
    with pytest.raises(ModelFileError, match=r"^nan-draft\.gguf: llama\.cpp computed non-finite logits"):
        check_pair(honest, nan)
