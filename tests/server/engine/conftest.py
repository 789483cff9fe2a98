"""Fixtures for the task engine tests: engines over both stores (memory and workspace
files), closed at teardown. Helpers live in ``engine_helpers``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.agent.base import Agent
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.task_store import MemoryTaskStore, TaskStore


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> TaskStore:
    if request.param == "memory":
        return MemoryTaskStore()
    return WorkspaceTaskStore(tmp_path / "ws")


@pytest.fixture
async def engines(store: TaskStore) -> AsyncIterator[list[TaskEngine]]:
    made: list[TaskEngine] = []
    yield made
    for engine in made:
        await engine.aclose()


@pytest.fixture
def new_engine(store: TaskStore, engines: list[TaskEngine]) -> Callable[..., TaskEngine]:
    def build(agent: Agent | None = None, **kwargs: Any) -> TaskEngine:
        engine = TaskEngine(agent or FauxAgent(), kwargs.pop("store", store), **kwargs)
        engines.append(engine)
        return engine

    return build


@pytest.fixture
def engine(new_engine: Callable[..., TaskEngine]) -> TaskEngine:
    return new_engine()
