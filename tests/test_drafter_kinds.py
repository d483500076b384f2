"""The drafter kinds are one table (``app/drafter_kinds.py``): a kind added there is
offered by every front end at once, the table names a factory the loader can run for
every kind, and the words users already have keep their meaning."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
from pathlib import Path

import grimp
import pytest

from app import drafter_kinds
from app.drafter_kinds import BenchMethod, KindSpec, Needs
from app.storage.settings import Settings, load_settings
from app.vocabulary import DrafterKind

ROOT = Path(__file__).resolve().parent.parent

# A kind that is not there: a draft file of its own, a bench method, a factory.
MEDUSA = KindSpec("medusa", "Medusa heads", "medusa heads in the target guess several tokens at once",
                  panel="medusa heads", loaded="its Medusa heads", needs=Needs.TARGET_HEAD,
                  factory="app.backends.drafter_factories:mtp_head",
                  bench=BenchMethod("medusa", "the target's Medusa heads, no draft"))


@pytest.fixture
def medusa(monkeypatch):
    monkeypatch.setattr(drafter_kinds, "KINDS", (*drafter_kinds.KINDS, MEDUSA))


def test_adding_a_kind_is_one_declaration(medusa, qtbot):
    """The one entry reaches the command line, the settings' check, the dialog's list
    and hint, the side panel, the window's loaded-model line and the bench."""
    from app.bench.methods import names
    from app.cli.main import build_parser
    from app.ui.settings_dialog import SettingsDialog

    parser = build_parser()
    for command in (["generate", "-p", "hi"], ["chat"], ["serve"], ["bench"], []):
        assert parser.parse_args([*command, "--drafter", "medusa"]).drafter == "medusa"
    assert "medusa: medusa heads in the target guess several tokens at once" in _drafter_help(parser)

    assert Settings(drafter="medusa").drafter == "medusa"

    dialog = SettingsDialog(Settings(drafter="medusa"))
    qtbot.addWidget(dialog)
    box = dialog.editors["drafter"]
    assert [box.itemData(i) for i in range(box.count())] == ["model", "lookup", "lookahead", "mtp", "medusa"]
    assert box.itemText(box.count() - 1) == "Medusa heads"
    assert dialog.settings().drafter == "medusa"
    assert dialog.compat_label.text() == "Medusa heads in the target guess several tokens at once."
    assert not dialog.editors["draft_path"].isEnabled()  # it needs no draft file

    assert drafter_kinds.panel_label("medusa", "") == "medusa heads"
    assert drafter_kinds.loaded_words("medusa", "") == "its Medusa heads"
    assert "medusa" in names()


def test_without_the_extra_kind_no_front_end_offers_it(qtbot):
    from app.bench.methods import names
    from app.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "-p", "hi", "--drafter", "medusa"])
    with pytest.raises(Exception, match="drafter must be one of"):
        Settings(drafter="medusa")
    assert "medusa" not in names()


def _drafter_help(parser: argparse.ArgumentParser) -> str:
    return next(a.help for a in parser._actions if "--drafter" in a.option_strings)


def test_every_drafter_kind_is_declared_once_in_the_enums_order():
    declared = [spec.kind for spec in drafter_kinds.declared()]
    assert declared == [kind for kind in DrafterKind if kind is not DrafterKind.NONE]
    assert all(isinstance(spec.kind, DrafterKind) for spec in drafter_kinds.declared())
    assert drafter_kinds.spec_of(DrafterKind.NONE) is None


def test_every_factory_resolves_within_the_layers_the_loader_may_import():
    """The loader resolves a factory by name, which the import contracts cannot see: it
    must live in the backends or the engine."""
    from app.backends.loader import factory

    for spec in drafter_kinds.declared():
        module = spec.factory.partition(":")[0]
        assert module.startswith(("app.backends.", "app.engine.")), spec.factory
        assert callable(factory(spec)), spec.factory
        assert importlib.import_module(module)


def test_the_table_is_a_leaf_every_layer_may_import():
    graph = grimp.build_graph("app")
    assert graph.find_modules_directly_imported_by("app.drafter_kinds") == {"app.vocabulary"}


def test_kind_words_and_bench_methods_are_unique():
    from app.bench import methods

    words = [str(spec.kind) for spec in drafter_kinds.declared()]
    assert len(words) == len(set(words))
    kind_methods = [spec.bench.name for spec in drafter_kinds.declared() if spec.bench]
    assert len(kind_methods) == len(set(kind_methods)) and not set(kind_methods) & set(methods._METHODS)


def test_an_eagle3_file_named_as_the_draft_model_runs_as_eagle3():
    """EAGLE-3 is chosen by naming its file as the draft model: not a word users choose,
    but the kind the load reports, which the stats and the side panel name."""
    assert drafter_kinds.runs_as(DrafterKind.MODEL, "eagle3") is DrafterKind.EAGLE3
    assert drafter_kinds.runs_as(DrafterKind.MODEL, "llama") == DrafterKind.MODEL
    assert drafter_kinds.runs_as(DrafterKind.LOOKUP, "eagle3") == DrafterKind.LOOKUP
    assert "eagle3" not in drafter_kinds.choices()
    assert drafter_kinds.recognised_architectures() == ("eagle3",)
    assert drafter_kinds.needs(DrafterKind.EAGLE3) is Needs.DRAFT_FILE
    assert drafter_kinds.panel_label(DrafterKind.EAGLE3, "eagle3.gguf") == "EAGLE-3: eagle3.gguf"
    assert drafter_kinds.loaded_words(DrafterKind.EAGLE3, "eagle3.gguf") == "EAGLE-3 drafter eagle3.gguf"
    from app.drafter_kinds import spec_of

    assert spec_of("eagle3").bench.name == "eagle3"


def test_the_labels_of_what_was_loaded():
    label, words = drafter_kinds.panel_label, drafter_kinds.loaded_words
    assert (label(DrafterKind.MODEL, "d.gguf"), words(DrafterKind.MODEL, "d.gguf")) == ("d.gguf", "draft d.gguf")
    assert (label(DrafterKind.NONE, ""), words(DrafterKind.NONE, "")) == ("none", "no draft")
    assert (label(DrafterKind.LOOKUP, ""), words(DrafterKind.LOOKUP, "")) == ("prompt lookup (no model)",
                                                                            "prompt lookup")
    assert (label(DrafterKind.MTP, ""), words(DrafterKind.MTP, "")) == ("mtp: the target's own head",
                                                                      "its own MTP head")


@pytest.mark.parametrize("word", ["model", "lookup", "lookahead", "mtp"])
def test_the_words_users_have_keep_loading(word, tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {"drafter": word}}))
    assert load_settings(path).settings.drafter == word
    from app.cli.main import build_parser

    assert build_parser().parse_args(["generate", "-p", "hi", "--drafter", word]).drafter == word



def test_the_bench_asks_a_drafter_its_kind_never_its_type():
    """No ``isinstance``, ``hasattr`` or ``getattr`` on a drafter in app/bench: it reads
    the drafter's declared ``kind`` (and the pair check), so a new kind needs no edit there."""
    probes = []
    for path in sorted((ROOT / "app" / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
                    and node.func.id in ("isinstance", "hasattr", "getattr") and "drafter" in ast.unparse(node.args[0])):
                probes.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert probes == []
