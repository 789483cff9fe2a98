"""Fixtures for the task engine tests: engines over each store (memory, workspace
files, PostgreSQL), closed at teardown. Helpers live in ``engine_helpers``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.agent.base import Agent
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.memory_store import MemoryTaskStore
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import PostgresTaskStore
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.task_store import TaskStore


@pytest.fixture(params=["memory", "file", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    if request.param == "memory":
        yield MemoryTaskStore()
    elif request.param == "file":
        yield WorkspaceTaskStore(tmp_path / "ws")
    else:
        # The session's cluster; each test starts from empty tables.
        postgres: LocalPostgres = request.getfixturevalue("postgres")
        pg_store = PostgresTaskStore(postgres.url, box=SecretBox(tmp_path / "ws"), pool_size=4)
        await pg_store.start()
        await pg_store.truncate()
        yield pg_store
        await pg_store.aclose()


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
