"""The import graph of the package (`tools/import_graph.py`): no cycle of any kind, no private name used
across modules, and laziness only for optional dependencies and whole subsystems.

The checker itself is tried first on small packages written for the test, so that a clean report of
`sse_tape` means the checker looked, not that it cannot see.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


graph = _load_checker()


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package `pkg` under `root`, each file by its path inside it."""
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# --- the checker, on packages written here ------------------------------------------------------------


def test_a_cycle_through_a_lazy_and_a_type_only_import_is_a_cycle(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from .b import B\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\nB = 1\n",
            "c.py": "def f():\n    from .a import A\nC = 1\n",
        },
    )
    report = graph.check(root, "pkg")
    assert report.cycles == (("pkg.a", "pkg.b", "pkg.c"),)
    kinds = {(each.module, each.target): each.kind for each in report.edges(report.cycles[0])}
    assert kinds == {("pkg.a", "pkg.b"): "top", ("pkg.b", "pkg.c"): "typing", ("pkg.c", "pkg.a"): "lazy"}


def test_a_package_importing_its_submodules_is_no_cycle_until_one_takes_a_name_from_the_package(
    tmp_path: Path,
) -> None:
    files = {
        "__init__.py": "from .app import App\nfrom .part import Part\n",
        "app.py": "from .part import Part\nApp = 1\n",
        "part.py": "Part = 1\n",
    }
    assert graph.check(write_package(tmp_path, files), "pkg").cycles == ()
    files["part.py"] = "from . import App\nPart = 1\n"  # a re-exported name: the package's __init__ runs first
    assert graph.check(write_package(tmp_path, files), "pkg").cycles == (("pkg", "pkg.app", "pkg.part"),)


def test_importing_a_module_of_a_package_runs_the_packages_init_first(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "server/__init__.py": "from .app import App\n",
            "server/app.py": "from ..background import Background\nApp = 1\n",
            "server/seam.py": "Seam = 1\n",
            "background.py": "from .server.seam import Seam\nBackground = 1\n",
        },
    )
    report = graph.check(root, "pkg")
    assert report.cycles == (("pkg.background", "pkg.server", "pkg.server.app"),)


def test_from_a_package_import_a_submodule_needs_the_submodule_not_the_package_init(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "__init__.py": "from .a import A\n",
            "a.py": "from . import b\nA = b.B\n",
            "b.py": "B = 1\n",
        },
    )
    report = graph.check(root, "pkg")
    assert report.cycles == ()
    assert [(each.module, each.target) for each in report.imports if each.module == "pkg.a"] == [("pkg.a", "pkg.b")]


def test_a_private_name_of_another_module_is_found_imported_or_reached_through_the_module(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "__init__.py": "__version__ = '1'\n",
            "_helpers.py": "def _hidden(): ...\ndef shown(): ...\n",
            "a.py": (
                "from . import __version__, _helpers\n"
                "from ._helpers import _hidden, shown\n"
                "import pkg._helpers as h\n"
                "def f():\n"
                "    return h._hidden(), _helpers.shown(), _helpers._hidden()\n"
            ),
        },
    )
    found = [str(each) for each in graph.check(root, "pkg").private]
    assert found == [
        "pkg/a.py:2: pkg._helpers._hidden",  # imported
        "pkg/a.py:5: pkg._helpers._hidden",  # h._hidden
        "pkg/a.py:5: pkg._helpers._hidden",  # _helpers._hidden; not `shown`, the module `_helpers` or `__version__`
    ]


def test_each_function_level_import_is_reported_with_its_module_line_and_function(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "import json\n\n\ndef load():\n    import difflib\n    import llama_cpp\n    from . import b\n",
            "b.py": "",
        },
    )
    lazy = graph.check(root, "pkg").lazy
    assert [(each.where(), each.function, each.target) for each in lazy] == [
        ("pkg/a.py:5", "load", "difflib"),
        ("pkg/a.py:6", "load", "llama_cpp"),
        ("pkg/a.py:7", "load", "pkg.b"),
    ]
    assert [each.target for each in graph.check(root, "pkg").lazy_not_allowed] == ["difflib", "pkg.b"]


# --- sse_tape -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report() -> Any:
    return graph.check()


def test_sse_tape_has_no_import_cycle_top_level_lazy_or_type_only(report: Any) -> None:
    cycles = [
        f"{', '.join(cycle)}:\n" + "\n".join(f"  {e.where()}: -> {e.target} ({e.kind})" for e in report.edges(cycle))
        for cycle in report.cycles
    ]
    assert not cycles, "\n".join(cycles)


def test_no_module_of_sse_tape_uses_a_private_name_of_another(report: Any) -> None:
    assert [str(used) for used in report.private] == []


def test_every_function_level_import_is_of_an_optional_dependency_or_a_whole_subsystem(report: Any) -> None:
    assert [f"{each.where()}: {each.target}" for each in report.lazy_not_allowed] == []
    assert report.lazy  # the allowed ones are found: llama_cpp, synthesis, the server


def test_the_script_prints_the_report_and_exits_0_on_sse_tape() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "import_graph.py")], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("import cycles: 0\nprivate names used across modules: 0\nfunction-level imports: ")
