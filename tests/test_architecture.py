"""The house has no circles: no module of ``app`` imports itself back through others,
and the import contracts of pyproject.toml hold (the same check as ``lint-imports``).
The tests mirror it: a folder of tests/ is a package of app/ (tests/engine/gguf for
app/engine/gguf), or one of the few named below with its reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent

# The folders of tests/ that mirror no package of app/, each with its reason. The root of
# tests/ itself holds the shared fixtures and helpers, the tests of app's top-level modules
# (test_worker_hello.py, test_vocabulary.py) and the whole-app ones (tests/README.md).
NOT_APP_FOLDERS = {
    "installers": "the installers' tests: tests/installers mirrors installers/",
    "tools": "the tools' tests (not product parts, but their figures are quoted): mirrors tools/",
}


def import_cycles(graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_the_import_graph_of_app_has_no_cycle():
    graph = grimp.build_graph("app")
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    class Graph:  # a hand-made graph: a -> b -> c -> a, and d alone
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, module):
            return self.edges.get(module, set())

    assert import_cycles(Graph()) == [["a", "b", "c"]]


def test_the_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "broken" in done.stdout and "0 broken" in done.stdout


def test_every_contract_checks_indirect_imports_too():
    """An exception is named in ``ignore_imports`` with its reason; no contract waves
    chains through."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert config["exclude_type_checking_imports"] is True  # annotations only do not count
    assert not [c["name"] for c in config["contracts"] if "allow_indirect_imports" in c]


def unmirrored_folders(tests: Path, app: Path, allowed: dict[str, str]) -> list[str]:
    """What is wrong with the folders of ``tests`` that hold Python files: one that is not
    a package (two test files of one name in two folders would clash in pytest), one that
    mirrors no package of ``app`` and is not ``allowed``. A folder without Python files is
    a test's data (tests/engine/prompting/tool_templates) and travels with its test."""
    wrong = []
    for folder in sorted(path for path in tests.rglob("*") if path.is_dir()):
        parts = folder.relative_to(tests).parts
        if "__pycache__" in parts or any(part.startswith(".") for part in parts) or not any(folder.glob("*.py")):
            continue
        name = "/".join(parts)
        if not (folder / "__init__.py").is_file():
            wrong.append(f"tests/{name}: no __init__.py")
        if name not in allowed and not (app / name / "__init__.py").is_file():
            wrong.append(f"tests/{name}: app/{name} is no package (a test of app/X/... lives in tests/X/...)")
    return wrong


def test_the_tests_mirror_the_packages_of_app():
    assert unmirrored_folders(ROOT / "tests", ROOT / "app", NOT_APP_FOLDERS) == []
    assert [name for name in NOT_APP_FOLDERS if not (ROOT / "tests" / name).is_dir()] == [], "a stale exception"


def test_the_mirror_check_finds_a_stray_folder(tmp_path):
    app, tests = tmp_path / "app", tmp_path / "tests"
    for package in ("engine", "engine/gguf"):
        (app / package).mkdir(parents=True)
        (app / package / "__init__.py").touch()
    for name in ("engine/__init__.py", "engine/gguf/__init__.py", "engine/gguf/test_meta.py",
                 "engine/gguf/data/model.json",                        # data: no rule
                 "misc/test_misc.py",                                  # no package, and no app/misc
                 "engine/lonely/__init__.py", "engine/lonely/test_lonely.py",  # no app/engine/lonely
                 "helpers/__init__.py", "helpers/fakes.py"):           # allowed below
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).touch()
    assert unmirrored_folders(tests, app, {"helpers": "shared"}) == [
        "tests/engine/lonely: app/engine/lonely is no package (a test of app/X/... lives in tests/X/...)",
        "tests/misc: no __init__.py",
        "tests/misc: app/misc is no package (a test of app/X/... lives in tests/X/...)",
    ]


# The front ends and the layers they use ask nothing of what they hold: a capability is a
# declared Protocol member or flag (app/bridge/client.Engine, app/engine/backend.py), so
# a client, a session or a target is never asked with hasattr, or getattr with a default.
UNPROBED = ("app/window", "app/bridge", "app/session", "app/server", "app/enginehost")
PLATFORM_MODULES = {"sys", "os", "signal"}


def capability_probes(source: str, name: str) -> list[str]:
    """Each ``hasattr(x, ...)`` and ``getattr(x, ..., default)`` in ``source``, as
    'name:line'. A ``getattr`` without a default names what must be there (a function in
    a file loaded by path); the platform's modules (``sys.frozen``, ``signal.SIGKILL``)
    are not what a front end holds."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        probe = node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)
        if probe and not (isinstance(node.args[0], ast.Name) and node.args[0].id in PLATFORM_MODULES):
            found.append(f"{name}:{node.lineno}")
    return found


def test_no_front_end_probes_what_it_holds():
    probes = []
    for folder in UNPROBED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            probes += capability_probes(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert probes == []


def test_the_probe_finder_finds_the_probes_the_window_had():
    old = ("if hasattr(client, 'died'):\n    client.died.connect(f)\n"
           "target = getattr(session, 'target', None)\n"
           "loader = getattr(module, name)\n"
           "frozen = getattr(sys, 'frozen', False)\n")
    assert capability_probes(old, "chat_controller.py") == ["chat_controller.py:1", "chat_controller.py:3"]
