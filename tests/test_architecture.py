"""The architecture, checked from the source (CONTRIBUTING.md, "The layers").

Four rules over the ``a2a_gateway`` package: every module imports alone in a fresh
interpreter, module-level imports form no cycle, no module imports from a layer above its
own (``protocol ← local ← agent ← server | client ← telegram ← gateway``), and no module
imports an underscore-prefixed name from another (a helper two modules share is public in
one of them). The import graph is read with ``ast`` from the folders ``pyproject.toml``
maps to the package; generated code (``lf.*``) and third-party packages are outside the
rules.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "a2a_gateway"

# What each layer may import from (its own layer included). server/ and client/ sit side
# by side: neither imports the other; what both need (the workspace layout, atomic writes,
# redaction, file names, signing, the address policy) is in local/, below them.
ALLOWED: Mapping[str, frozenset[str]] = {
    "protocol": frozenset({"protocol"}),
    "local": frozenset({"protocol", "local"}),
    "agent": frozenset({"protocol", "local", "agent"}),
    "server": frozenset({"protocol", "local", "agent", "server"}),
    "client": frozenset({"protocol", "local", "agent", "client"}),
    "telegram": frozenset({"protocol", "local", "agent", "server", "client", "telegram"}),
    "gateway": frozenset({"protocol", "local", "agent", "server", "client", "telegram", "gateway"}),
}


@dataclass(frozen=True)
class Import:
    """One import statement's dependency of a module of ours on another module of ours."""

    source: str
    target: str
    line: int
    # Runs when the source is imported: at module level and outside ``if TYPE_CHECKING:``
    # (a function's import runs later; a TYPE_CHECKING one never).
    at_import_time: bool


def package_folders() -> dict[str, Path]:
    """``a2a_gateway`` and its subpackages, each with its folder (pyproject's package-dir)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders = config["tool"]["setuptools"]["package-dir"]
    return {
        name: REPO / folder
        for name, folder in folders.items()
        if name == PACKAGE or name.startswith(PACKAGE + ".")
    }


@functools.cache
def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package is its ``__init__``)."""
    modules = {}
    for package, folder in package_folders().items():
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def _import_statements(tree: ast.Module) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import in the file, with whether it runs when the module is imported."""

    def visit(
        statements: list[ast.stmt], at_import_time: bool
    ) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
        for statement in statements:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                yield statement, at_import_time
            elif isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
                yield from visit(statement.body, False)
                yield from visit(statement.orelse, at_import_time)
            elif isinstance(statement, ast.If | ast.Try | ast.With):
                for block in ("body", "orelse", "finalbody"):
                    yield from visit(getattr(statement, block, []), at_import_time)
                for handler in getattr(statement, "handlers", []):
                    yield from visit(handler.body, at_import_time)
            elif isinstance(statement, ast.ClassDef):
                yield from visit(statement.body, at_import_time)  # runs with the module
            else:
                # A function's imports run when it is called: they count for the layers,
                # not for what importing the module executes.
                for node in ast.walk(statement):
                    if isinstance(node, ast.Import | ast.ImportFrom):
                        yield node, False

    return visit(tree.body, True)


def _owning_module(dotted: str, modules: Mapping[str, Path]) -> str | None:
    """The module of ours that ``dotted`` names or lies in (``pkg.mod.Name`` → ``pkg.mod``)."""
    while dotted:
        if dotted in modules:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return None


def _absolute(statement: ast.ImportFrom, package: str) -> str:
    """The module a ``from … import`` names, resolved against ``package`` when relative."""
    base = statement.module or ""
    if statement.level:
        anchor = package.split(".")[: len(package.split(".")) - (statement.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return base


def _package_of(module: str, modules: Mapping[str, Path]) -> str:
    is_package = modules.get(module, Path()).name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


def private_imports(module: str, source: str, modules: Mapping[str, Path]) -> list[str]:
    """``module:line name`` for each underscore-prefixed name (dunders aside) that
    ``source`` imports from another module of ours: a helper shared between modules is
    public in one of them, not borrowed by its private name."""
    package = _package_of(module, modules)
    found = []
    for statement, _ in _import_statements(ast.parse(source)):
        if not isinstance(statement, ast.ImportFrom):
            continue
        base = _absolute(statement, package)
        if base.split(".")[0] != PACKAGE:
            continue
        for alias in statement.names:
            private = alias.name.startswith("_") and not alias.name.endswith("__")
            if private and _owning_module(f"{base}.{alias.name}", modules) != module:
                found.append(f"{module}:{statement.lineno} {base}.{alias.name}")
    return found


def imports_of(module: str, source: str, modules: Mapping[str, Path]) -> list[Import]:
    """The imports of ours in ``source``, the text of ``module``."""
    package = _package_of(module, modules)
    found = []
    for statement, at_import_time in _import_statements(ast.parse(source)):
        if isinstance(statement, ast.Import):
            targets = [alias.name for alias in statement.names]
        else:
            base = _absolute(statement, package)
            # ``from pkg import name``: name is a submodule, or an attribute of pkg.
            targets = [f"{base}.{alias.name}" for alias in statement.names]
        for target in targets:
            if target.split(".")[0] != PACKAGE:
                continue
            owner = _owning_module(target, modules)
            if owner is not None and owner != module:
                found.append(Import(module, owner, statement.lineno, at_import_time))
    return found


@functools.cache
def package_imports() -> tuple[Import, ...]:
    modules = module_files()
    return tuple(
        found
        for module, path in modules.items()
        for found in imports_of(module, path.read_text(), modules)
    )


def layer_of(module: str) -> str:
    """The layer a module of ours belongs to (the root package's modules are ``gateway``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else "gateway"


def upward_imports(imports: Iterable[Import]) -> list[Import]:
    """Imports from a layer the source's layer may not import from."""
    return [
        found for found in imports if layer_of(found.target) not in ALLOWED[layer_of(found.source)]
    ]


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def import_time_graph(imports: Iterable[Import]) -> dict[str, set[str]]:
    """What importing each module executes first: its import-time targets, and their
    packages' ``__init__`` (Python runs a package before its module) unless already running."""
    graph: dict[str, set[str]] = {}
    for found in imports:
        if not found.at_import_time:
            continue
        running = {found.source, *_ancestors(found.source)}
        targets = {found.target, *_ancestors(found.target)} - running
        graph.setdefault(found.source, set()).update(targets)
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_time_graph(package_imports())) == []


def test_no_module_imports_from_a_layer_above() -> None:
    found = [
        f"{found.source}:{found.line} imports {found.target}"
        for found in upward_imports(package_imports())
    ]
    assert found == [], "an upward import (CONTRIBUTING.md, 'The layers')"


def test_the_client_package_loads_nothing_of_the_server() -> None:
    """What client/ shares with server/ is in local/: importing the client loads no module
    of server/ (nor of the layers above; the root package itself runs first, as Python
    runs every package before its modules)."""
    loaded = _loads(["a2a_gateway.client"], import_time_graph(package_imports()))
    above = ("server", "telegram", "gateway")
    assert [name for name in loaded if layer_of(name) in above and name != PACKAGE] == []


def test_the_checks_report_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    modules = {**module_files(), "a2a_gateway.protocol.leak": tmp_path / "leak.py"}
    leak = imports_of(
        "a2a_gateway.protocol.leak",
        "from ..server import files\nfrom a2a_gateway.protocol.errors import A2AError\n"
        "def later() -> None:\n    from a2a_gateway.client.remote import connect\n",
        modules,
    )
    assert leak == [
        Import("a2a_gateway.protocol.leak", "a2a_gateway.server.files", 1, True),
        Import("a2a_gateway.protocol.leak", "a2a_gateway.protocol.errors", 2, True),
        Import("a2a_gateway.protocol.leak", "a2a_gateway.client.remote", 4, False),
    ]
    assert [found.target for found in upward_imports(leak)] == [
        "a2a_gateway.server.files",
        "a2a_gateway.client.remote",
    ]
    # The same leak answered by an import back from server/ is a cycle.
    graph = import_time_graph([*package_imports(), *leak])
    graph.setdefault("a2a_gateway.server.files", set()).add("a2a_gateway.protocol.leak")
    assert ["a2a_gateway.protocol.leak", "a2a_gateway.server.files"] in cycles(graph)


@pytest.mark.parametrize(
    ("module", "source", "upward"),
    [
        # local/ stands on protocol/ only.
        (
            "a2a_gateway.local.leak",
            "from a2a_gateway.protocol.errors import A2AError\n"
            "from .atomic_files import write_all\nfrom a2a_gateway.agent.base import Turn\n",
            ["a2a_gateway.agent.base"],
        ),
        # client/ takes what it shares with server/ from local/, never from server/.
        (
            "a2a_gateway.client.leak",
            "from a2a_gateway.local.addresses import forbidden_reason\n"
            "from a2a_gateway.server.outbound import check_url\n",
            ["a2a_gateway.server.outbound"],
        ),
        # server/ takes the redaction registry from local/, never from the root package.
        (
            "a2a_gateway.server.leak",
            "from a2a_gateway.local.redaction import register_secret\n"
            "from a2a_gateway.logs import setup_logging\n",
            ["a2a_gateway.logs"],
        ),
        # agent/ may use local/ (a relative import too).
        ("a2a_gateway.agent.leak", "from ..local import files\n", []),
    ],
)
def test_the_layer_check_reports_an_import_from_above_local(
    module: str, source: str, upward: list[str], tmp_path: Path
) -> None:
    modules = {**module_files(), module: tmp_path / "leak.py"}
    found = upward_imports(imports_of(module, source, modules))
    assert [imported.target for imported in found] == upward


def test_no_module_imports_a_private_name_from_another() -> None:
    modules = module_files()
    found = [
        hit
        for module, path in modules.items()
        for hit in private_imports(module, path.read_text(), modules)
    ]
    assert found == [], "make the shared helper public in one module"


def test_the_check_reports_a_private_name_imported_from_another_module(tmp_path: Path) -> None:
    modules = {**module_files(), "a2a_gateway.protocol.compat03.leak": tmp_path / "leak.py"}
    source = (
        "from .tables import _TERMINAL_OUT, JSON\n"
        "from a2a_gateway.server.ids import _random_bits as bits\n"
        "from . import __all__, tables\n"
        "from google.protobuf import _message\n"
        "def later() -> None:\n    from ..errors import _BY_REASON\n"
    )
    assert private_imports("a2a_gateway.protocol.compat03.leak", source, modules) == [
        "a2a_gateway.protocol.compat03.leak:1 a2a_gateway.protocol.compat03.tables._TERMINAL_OUT",
        "a2a_gateway.protocol.compat03.leak:2 a2a_gateway.server.ids._random_bits",
        "a2a_gateway.protocol.compat03.leak:6 a2a_gateway.protocol.errors._BY_REASON",
    ]


# Runs in a fresh interpreter: loads the third-party packages ours import (and the
# generated code), then forks one child per module that imports just that module. A child
# also reports every other module of ours whose import began with nothing of ours loaded
# but what importing that module alone loads first (its packages and their imports):
# those count as imported alone too, so far fewer children are needed.
_IMPORT_ALONE = r"""
import importlib, json, os, sys, traceback
plan = json.load(sys.stdin)
for name in plan["preload"]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass


# Sees each module of ours before it loads; the parent loaded none of ours.
class Recorder:

    def __init__(self):
        self.started = []
        self.alone = []

    def find_spec(self, name, path=None, target=None):
        before = plan["before"].get(name)
        if before is not None:
            loaded = {
                started
                for started in self.started
                if started in sys.modules
                and not getattr(sys.modules[started].__spec__, "_initializing", False)
            }
            if loaded <= set(before):
                self.alone.append(name)
            self.started.append(name)
        return None


def child(module, write_end):
    recorder = Recorder()
    sys.meta_path.insert(0, recorder)
    try:
        importlib.import_module(module)
        report = {"alone": recorder.alone}
    except BaseException:
        report = {"error": traceback.format_exc()[-4000:]}
    os.write(write_end, json.dumps(report).encode())
    os._exit(0)


alone, errors, children, running = set(), {}, 0, {}


def reap():
    pid, _ = os.wait()
    module, read_end = running.pop(pid)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    report = json.loads(data or b'{"error": "the child died"}')
    if "error" in report:
        errors[module] = report["error"]
    alone.update(report.get("alone", []))


for module in plan["order"]:
    while len(running) >= 2:
        reap()
    if module in alone:
        continue
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        child(module, write_end)
    os.close(write_end)
    running[pid] = (module, read_end)
    children += 1
while running:
    reap()
print(json.dumps({"alone": sorted(alone), "errors": errors, "children": children}))
"""


def _third_party_imports() -> list[str]:
    names = set()
    for path in module_files().values():
        for statement, at_import_time in _import_statements(ast.parse(path.read_text())):
            if not at_import_time:
                continue
            if isinstance(statement, ast.Import):
                names.update(alias.name for alias in statement.names)
            elif statement.module and not statement.level:
                # ``from package import module`` loads the module too; a name that is
                # not a module fails to import in the preload and is skipped there.
                names.add(statement.module)
                names.update(f"{statement.module}.{alias.name}" for alias in statement.names)
    return sorted(name for name in names if name.split(".")[0] != PACKAGE)


def _loads(modules: Iterable[str], graph: Mapping[str, set[str]]) -> list[str]:
    """Every module of ours that importing ``modules`` loads (they included)."""
    loaded: set[str] = set()
    pending = list(modules)
    while pending:
        name = pending.pop()
        if name not in loaded:
            loaded.add(name)
            pending.extend(graph.get(name, ()))
            pending.extend(_ancestors(name))
    return sorted(loaded)


def _loaded_before(module: str, graph: Mapping[str, set[str]]) -> list[str]:
    """What importing ``module`` alone loads before it runs: its packages, and theirs."""
    return _loads(_ancestors(module), graph)


def test_every_module_imports_alone_in_a_fresh_interpreter(tmp_path: Path) -> None:
    # __main__ modules run the CLI when imported; `python -m` is what loads them.
    modules = [name for name in module_files() if not name.endswith(".__main__")]
    graph = import_time_graph(package_imports())
    # The modules that load the most go first: each child then vouches for many others.
    plan = {
        "preload": _third_party_imports(),
        "order": sorted(modules, key=lambda name: (-len(_loads([name], graph)), name)),
        "before": {name: _loaded_before(name, graph) for name in modules},
    }
    # Bytecode cached in tmp_path even where the environment says not to write it: each
    # child compiling every module again costs more than the imports themselves.
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    run = subprocess.run(
        [sys.executable, "-P", "-c", _IMPORT_ALONE],
        input=json.dumps(plan),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stderr == ""  # no warning either (a fork after a thread started, say)
    result = json.loads(run.stdout)
    assert result["errors"] == {}
    assert sorted(set(modules) - set(result["alone"])) == []


# --- class size (issue 24: no class over 400 lines in server/) -------------------------

MAX_CLASS_LINES = 400


def classes_over(folder: Path, limit: int = MAX_CLASS_LINES) -> list[str]:
    """``path:line Name (n lines)`` of each class under ``folder`` longer than ``limit``
    lines (decorators excluded, docstring and nested classes included)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    where = path.relative_to(folder.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_class_in_server_is_over_400_lines() -> None:
    # A class past this holds several roles: split it by concern (see server/pg_store/).
    assert classes_over(REPO / "server") == []


def test_the_class_size_check_reports_a_long_class(tmp_path: Path) -> None:
    folder = tmp_path / "server"
    folder.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLASS_LINES))
    (folder / "big.py").write_text(f"class Small:\n    pass\n\n\nclass Big:\n{body}")
    (folder / "edge.py").write_text("class Edge:\n" + body[: body.rindex("    x")])
    assert classes_over(folder) == [f"server/big.py:5 Big ({MAX_CLASS_LINES + 1} lines)"]
