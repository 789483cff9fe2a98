"""The suite-wide ``workspace`` and ``callers`` fixtures (registered by
``tests/conftest.py``; see :mod:`tests.support.workspace`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .workspace import Callers, make_workspace, write_callers


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "callers(*entries): the callers.json entries of the test's `workspace` "
        "(tests/support/workspace.py)",
    )


@pytest.fixture
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """``tmp_path / "ws"`` (resolved) with its ``.a2a/`` folder; its callers.json holds
    the entries of the closest ``callers`` marker (no marker: no callers.json)."""
    marker = request.node.get_closest_marker("callers")
    return make_workspace(tmp_path / "ws", list(marker.args) if marker is not None else None)


@pytest.fixture
def callers(workspace: Path) -> Callable[[Callers], Path]:
    """``callers(entries)``: rewrites the workspace's callers.json; returns its path."""

    def write(entries: Callers) -> Path:
        return write_callers(workspace, entries)

    return write
