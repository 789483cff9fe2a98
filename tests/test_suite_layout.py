"""The suite's helpers live in one place, tests/support: no test file (conftest.py
included) defines a fixture of its own named like a shared one, nor its own free-port
helper, nor its own echo service."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .support import ports

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"
#: Fixtures only tests/support defines (tests/support/fixtures.py).
SHARED_FIXTURES = frozenset({"workspace", "callers"})
#: Helpers only tests/support defines (tests/support/ports.py).
SHARED_HELPERS = frozenset({"free_port", "free_ports", "_free_port"})
#: Services only tests/support defines (tests/support/echo.py); a test subclasses them.
SHARED_CLASSES = frozenset({"EchoService", "FloodService", "HoldingService"})
#: A script of its own, run in a copy of the repository: it cannot import tests.support.
STANDALONE = frozenset({TESTS / "e2e" / "readme_runner.py"})


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name a ``@pytest.fixture`` function registers, or None when it is none."""
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call is not None else decorator
        if not ast.unparse(target).endswith("fixture"):
            continue
        for keyword in call.keywords if call is not None else []:
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
        return node.name
    return None


def misplaced(source: str, where: str) -> list[str]:
    """Every shared fixture or helper that ``source`` defines itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name in SHARED_CLASSES:
            found.append(f"{where}:{node.lineno} defines the class {node.name}")
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        fixture = _fixture_name(node)
        if fixture in SHARED_FIXTURES:
            found.append(f"{where}:{node.lineno} defines the fixture {fixture!r}")
        elif node.name in SHARED_HELPERS:
            found.append(f"{where}:{node.lineno} defines {node.name}()")
    return found


def test_no_test_file_defines_a_shared_fixture_or_helper() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if SUPPORT in path.parents or path in STANDALONE:
            continue
        found += misplaced(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS)))
    assert found == [], "use tests/support instead:\n" + "\n".join(found)


def test_the_scan_finds_a_local_workspace_fixture_in_any_spelling() -> None:
    source = """
import pytest
from pytest import fixture

@pytest.fixture
def workspace(tmp_path): return tmp_path

@fixture(name="callers")
async def my_callers(workspace): return []

@pytest.fixture()
def other(): return 1

def free_ports(count): return []

class EchoService: pass

class SlowService(EchoService): pass
"""
    assert misplaced(source, "t.py") == [
        "t.py:6 defines the fixture 'workspace'",
        "t.py:9 defines the fixture 'callers'",
        "t.py:14 defines free_ports()",
        "t.py:16 defines the class EchoService",
    ]


def test_the_shared_fixtures_are_defined_in_tests_support() -> None:
    source = (SUPPORT / "fixtures.py").read_text(encoding="utf-8")
    assert {f.split("'")[1] for f in misplaced(source, "fixtures.py")} == SHARED_FIXTURES


def test_each_worker_is_given_ports_of_its_own_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two xdist workers draw from disjoint slices under the system's ephemeral range (a
    port released before its server binds it cannot be taken by the other worker), and
    free_ports hands out distinct ports, not the same ones again on the next call."""
    slices = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        slices.append(set(ports._worker_slice()))
    assert slices[0] and slices[1] and not slices[0] & slices[1]
    assert max(slices[0] | slices[1]) < ports.HIGH_PORT <= 32768
    first, second = ports.free_ports(3), ports.free_ports(3)
    assert len(set(first + second)) == 6
    if ports._SLICE:  # (the system's ephemeral range starts above ours: Linux's default)
        assert set(first + second) <= set(ports._SLICE)
