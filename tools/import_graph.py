"""The import graph of `sse_tape`: cycles, private names imported across modules, and where laziness is used.

Run it from the repository root:

    python tools/import_graph.py

It reads every module of the package with `ast` (nothing is imported) and
prints three lists, then exits non-zero when the first two are not empty or
when a function-level import is not one the lists below allow
(`tests/test_imports.py` runs the same checks):

1. every import cycle: each strongly connected component of the graph, with
   the import lines that make it;
2. every private name imported from another module of the package:
   `from M import _name`, or `M._name` where `M` is bound to a module of the
   package (a dunder such as `__version__` is not private; a private
   *module* such as `sse_tape._json` is the package's own and may be imported);
3. every function-level import, with its module and line, so that a reader
   sees where laziness is used. Each must be of an optional dependency
   (`OPTIONAL`) or of a whole subsystem (`SUBSYSTEMS`).

An import counts alike wherever it is written: at the top of a module, inside
a function (lazy) or under `if TYPE_CHECKING:` (type-only). A lazy or a
type-only import still says that one module needs the other, and a cycle
through it is a cycle in the concepts even when Python does not trip on it.

Which modules an import makes an edge to, following what Python really runs:

- `import a.b.c` and `from a.b import c` where `a/b/c.py` is a module: an
  edge to `a.b.c`. Python runs the `__init__` of every package above it
  first, so there is also an edge to each of those packages, except the ones
  the importing module is itself inside: those are already being imported
  by the time the importing module runs.
- `from a.b import name` where `name` is not a module (a class, a function,
  a re-exported name): an edge to the package `a.b`, that is its `__init__`,
  even when the importing module is inside `a.b`. A re-exported name is not
  followed to the module that defines it: Python runs the whole `__init__`,
  with every import in it, and needs it finished to find the name, which is
  how a submodule that takes a name from its own package's `__init__` closes
  a cycle.
- Relative imports (`from . import x`, `from ..y import z`) are resolved
  against the importing module's package the way Python resolves them.
- A package's `__init__` importing its own submodules is an ordinary edge from
  the package to the submodule. It is not a cycle by itself: it becomes one
  only when something under the submodule imports the package back by name.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "sse_tape"
ROOT = Path(__file__).resolve().parent.parent

OPTIONAL: Mapping[str, str] = {
    "llama_cpp": "llama-cpp-python, the `synth` extra: installed only where synthesis is wanted",
    "redis": "redis-py, the `redis` extra: installed only where replicas share their replay state",
}
"""Outside packages a function may import: optional dependencies (an extra), by top-level name, with why."""

SUBSYSTEMS: Mapping[str, str] = {
    "sse_tape.cli": "the command line: `main` imports it with the collector at rest and Ctrl-C already heard",
    "sse_tape.server": "the server (aiohttp, all that answers): a command imports it once its words are understood, "
    "the pytest plugin when a test first uses a tape, not in every pytest session of every project",
    "sse_tape.probe": "the gateway probe: it runs a server, so `probe` imports it once its words are understood, "
    "the pytest plugin when a test first asks for `sse_tape_probe`",
    "sse_tape.cli.serving": "the command line's side of a running server (listening, stopping): it imports the server",
    "sse_tape.workers": "`serve --workers`: the server in forked worker processes",
    "sse_tape.record": "forwarding to an upstream, `record_once` and `fetch_each`: only a server whose misses go "
    "upstream, `record`, `check --live` and `check --drift` need it",
    "sse_tape.synth": "synthesis: a local model through llama-cpp-python, the `synth` extra",
    "sse_tape.pytest_plugin.async_fixture": "the async fixture: made only where pytest-asyncio, an optional "
    "dependency, runs the session",
}
"""Parts of `sse_tape` a function may import, by module (and everything under it), with why each is lazy:
whole subsystems, never a module imported late to save milliseconds (the cold start is measured by
`bench/peers_bench.py --only cold`, not kept by laziness)."""


@dataclass(frozen=True, slots=True)
class Import:
    """One module's need of another, from one import statement (or one `M.x` of a module bound `M`)."""

    module: str
    """The importing module."""
    line: int
    target: str
    """The module imported: a module of the package, or an outside one as written."""
    kind: str
    """`top`, `lazy` (inside a function) or `typing` (under `if TYPE_CHECKING:`)."""
    function: str | None = None
    """The function it is written in, for a lazy import."""
    written: bool = True
    """False for an edge to a package above the module imported, which Python imports first."""
    path: str = ""
    """The importing module's file."""

    def where(self) -> str:
        """`path:line`."""
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Private:
    """A private name of one module used by another."""

    module: str
    line: int
    owner: str
    """The module whose name it is."""
    name: str
    path: str = ""
    """The using module's file."""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.owner}.{self.name}"


@dataclass(frozen=True, slots=True)
class Report:
    """What `check` found."""

    imports: tuple[Import, ...]
    cycles: tuple[tuple[str, ...], ...]
    """Each strongly connected component of more than one module (or a module importing itself), sorted."""
    private: tuple[Private, ...]

    @property
    def lazy(self) -> tuple[Import, ...]:
        """Every function-level import, once for each module named in it."""
        return tuple(found for found in self.imports if found.kind == "lazy" and found.written)

    @property
    def lazy_not_allowed(self) -> tuple[Import, ...]:
        """The function-level imports of neither an optional dependency nor a whole subsystem."""
        return tuple(found for found in self.lazy if why_lazy(found.target) is None)

    def edges(self, cycle: Iterable[str]) -> list[Import]:
        """The imports between the modules of one cycle."""
        inside = set(cycle)
        return [found for found in self.imports if found.module in inside and found.target in inside]


def why_lazy(target: str) -> str | None:
    """Why a function may import `target`, or None when it should be imported at the top of its module."""
    within = [name for name in SUBSYSTEMS if target == name or target.startswith(name + ".")]
    if within:
        return SUBSYSTEMS[max(within, key=len)]  # the narrowest: `sse_tape.cli.serving`, not `sse_tape.cli`
    return OPTIONAL.get(target.partition(".")[0])


def find_modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of a package under `root` by dotted name (a package by its own name, for its `__init__`)."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def parents(module: str) -> list[str]:
    """The packages above a module, outermost first."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


class _Reader(ast.NodeVisitor):
    """Collects one module's imports, with their kind, and its uses of other modules' private names."""

    def __init__(self, module: str, modules: Mapping[str, Path], path: str) -> None:
        self.module = module
        self.modules = modules
        self.path = path
        self.is_package = modules[module].name == "__init__.py"
        self.imports: dict[Import, None] = {}  # in order, each once: `from M import a, b` is one need of M
        self.private: list[Private] = []
        self.bound: dict[str, str] = {}  # a name the module binds to a module of the package -> that module
        self.functions: list[str] = []
        self.typing = 0

    # where an import is written

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.functions.append("<lambda>")
        self.generic_visit(node)
        self.functions.pop()

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
        if name != "TYPE_CHECKING":
            self.generic_visit(node)
            return
        self.typing += 1
        for child in node.body:
            self.visit(child)
        self.typing -= 1
        for child in node.orelse:
            self.visit(child)

    def _add(self, node: ast.stmt, target: str, *, explicit: bool = False) -> None:
        """An edge to `target`, and to the packages above it that the importing module is not inside.

        `explicit`: a name is taken from the package `target` itself, so it must have run to its end: the
        edge stays even when the importing module is inside it.
        """
        kind = "lazy" if self.functions else "typing" if self.typing else "top"
        function = self.functions[-1] if self.functions else None
        own = set(parents(self.module)) | ({self.module} if self.is_package else set())
        for package in parents(target):
            if package not in own and package in self.modules:
                self.imports[Import(self.module, node.lineno, package, kind, function, False, self.path)] = None
        if explicit or target not in own:
            self.imports[Import(self.module, node.lineno, target, kind, function, True, self.path)] = None

    # the imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self.absolute(node)
        if base not in self.modules:  # an outside module
            self._add(node, base)
            return
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in self.modules:
                self._add(node, submodule)
            else:
                self._add(node, base, explicit=True)
                if is_private(alias.name) and base != self.module:
                    self.private.append(Private(self.module, node.lineno, base, alias.name, self.path))

    def absolute(self, node: ast.ImportFrom) -> str:
        """The module a `from` import names, its dots resolved against the importing module's package."""
        if not node.level:
            return node.module or ""
        package = self.module if self.is_package else self.module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{node.module}" if node.module else package

    def bind(self, node: ast.Import | ast.ImportFrom) -> None:
        """Note the names an import binds to modules of the package (`import a.b as m`, `from a import b`)."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in self.modules:
                    name = alias.asname or alias.name.partition(".")[0]
                    self.bound[name] = alias.name if alias.asname else name
            return
        base = self.absolute(node)
        for alias in node.names:
            if f"{base}.{alias.name}" in self.modules:
                self.bound[alias.asname or alias.name] = f"{base}.{alias.name}"

    # `M._name` of a module bound to `M`

    def visit_Attribute(self, node: ast.Attribute) -> None:
        owner = self._module_of(node.value)
        if (
            owner is not None
            and owner != self.module
            and f"{owner}.{node.attr}" not in self.modules
            and is_private(node.attr)
        ):
            self.private.append(Private(self.module, node.lineno, owner, node.attr, self.path))
        self.generic_visit(node)

    def _module_of(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return self.bound.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self._module_of(node.value)
            if owner is not None and f"{owner}.{node.attr}" in self.modules:
                return f"{owner}.{node.attr}"
        return None


def is_private(name: str) -> bool:
    """`_name` is private; a dunder (`__version__`, `__all__`) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def read(module: str, modules: Mapping[str, Path], root: Path = ROOT) -> tuple[list[Import], list[Private]]:
    """One module's imports and its uses of other modules' private names."""
    path = modules[module]
    shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    reader = _Reader(module, modules, shown)
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):  # a name a function uses may be bound by an import further down
        if isinstance(node, ast.Import | ast.ImportFrom):
            reader.bind(node)
    reader.visit(tree)
    return list(reader.imports), reader.private


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> Iterator[list[str]]:
    """The strongly connected components of a graph, each sorted (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(graph):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    yield sorted(component)


def check(root: Path = ROOT, package: str = PACKAGE) -> Report:
    """Read every module of `package` (under `root`) and find its import cycles and the private names its
    modules use of each other."""
    modules = find_modules(root, package)
    imports: list[Import] = []
    private: list[Private] = []
    for module in modules:
        found, used = read(module, modules, root)
        imports += found
        private += used
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for each in imports:
        if each.target in modules:
            graph[each.module].add(each.target)
    cycles = [
        tuple(component)
        for component in strongly_connected(graph)
        if len(component) > 1 or component[0] in graph[component[0]]
    ]
    return Report(tuple(imports), tuple(sorted(cycles)), tuple(private))


def main() -> int:
    """Print the report; 1 when there is a cycle, a private import, or a lazy import not allowed."""
    report = check()
    print(f"import cycles: {len(report.cycles)}")
    for cycle in report.cycles:
        print(f"  {len(cycle)} modules: {', '.join(cycle)}")
        for each in report.edges(cycle):
            print(f"    {each.where()}: {each.module} -> {each.target} ({each.kind})")
    print(f"private names used across modules: {len(report.private)}")
    for used in report.private:
        print(f"  {used}")
    print(f"function-level imports: {len(report.lazy)}")
    for each in report.lazy:
        why = why_lazy(each.target) or "NOT ALLOWED: import it at the top of the module"
        print(f"  {each.where()} in {each.function}(): {each.target}: {why}")
    return 1 if report.cycles or report.private or report.lazy_not_allowed else 0


if __name__ == "__main__":
    sys.exit(main())
