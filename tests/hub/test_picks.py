"""Tandem's picks are data: every entry names a repository, a file and a revision."""

from app.drafter_kinds import Needs, choices, needs
from app.hub.files import quant_of
from app.hub.picks import load_picks, picks_for


def test_every_pick_is_a_well_formed_pair():
    how, picks = load_picks()
    assert "draft" in how and "revision" in how.lower() and len(picks) >= 5
    for pick in picks:
        assert pick.drafter in choices()  # a word the settings take (app/drafter_kinds.py)
        assert pick.target.filename.endswith(".gguf") and quant_of(pick.target.filename)
        assert (pick.draft is not None) == (needs(pick.drafter) is Needs.DRAFT_FILE)
        assert pick.gpu_gb >= 0
    assert [p.gpu_gb for p in picks] == sorted(p.gpu_gb for p in picks)


def test_picks_are_filtered_by_name_and_gpu():
    small = picks_for("", gpu_gb=0)
    assert small and all(p.gpu_gb == 0 for p in small)
    assert all("qwen" in (p.name + p.target.repo).lower() for p in picks_for("qwen"))
    assert picks_for("no-such-family-anywhere") == []
