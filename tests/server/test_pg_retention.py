"""``--task-retention`` on PostgreSQL: exactly the settled tasks older than the maximum
age go, with their push configs, retry keys and events (inbox files only when asked),
in batches; interrupted and running tasks never expire by age; one replica at a time."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.context import Caller
from a2a_gateway.serve import Gateway
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import RETENTION_LOCK, PostgresTaskStore
from a2a_gateway.server.retention import Retention
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.task_store import TaskFilter, TaskRecord
from a2a_gateway.settings import resolve
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.ports import free_port
from tests.support.postgres import fresh_database

from .engine.test_retention import DAY, NOW, aged, with_saved_files

ALICE = Caller(name="alice", workspace="/ws/one")
BOB = Caller(name="bob", workspace="/ws/one")


def with_push(rec: TaskRecord) -> TaskRecord:
    config = pb.TaskPushNotificationConfig(
        id="cfg", task_id=rec.task.id, url="https://example.test/hook", token="tok-1234"
    )
    return TaskRecord(rec.task, rec.owner, [config], {})


async def counts(url: str) -> dict[str, list[str]]:
    """The task ids each table still names."""
    conn = await asyncpg.connect(url)
    try:
        found: dict[str, list[str]] = {}
        for table in ("a2a_tasks", "a2a_push_configs", "a2a_retry_keys", "a2a_events"):
            rows = await conn.fetch(f"SELECT DISTINCT task_id FROM {table} ORDER BY task_id")
            found[table] = [r[0] for r in rows]
        return found
    finally:
        await conn.close()


async def test_only_settled_tasks_older_than_the_age_go_with_their_rows(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path))
    old_settled = [
        aged("old-done", pb.TASK_STATE_COMPLETED, 40, ALICE),
        aged("old-failed", pb.TASK_STATE_FAILED, 31, ALICE),
        aged("old-canceled", pb.TASK_STATE_CANCELED, 365, ALICE),
        aged("old-rejected", pb.TASK_STATE_REJECTED, 90, ALICE),
        aged("bobs-old", pb.TASK_STATE_COMPLETED, 50, BOB),
    ]
    kept = [
        aged("new-done", pb.TASK_STATE_COMPLETED, 29, ALICE),
        aged("old-asking", pb.TASK_STATE_INPUT_REQUIRED, 400, ALICE),
        aged("old-auth", pb.TASK_STATE_AUTH_REQUIRED, 400, ALICE),
        aged("old-working", pb.TASK_STATE_WORKING, 400, ALICE),
    ]
    try:
        await store.start()
        store.remember_message(ALICE, "m-old", "fp", "old-done")
        store.remember_message(ALICE, "m-new", "fp", "new-done")
        for rec in old_settled + kept:
            await store.save(with_push(rec))
        conn = await asyncpg.connect(url)
        try:  # a few logged events of one old and one kept task
            await conn.execute(
                "INSERT INTO a2a_events(task_id, seq, event) VALUES"
                " ('old-done', 1, ''), ('old-done', 2, ''), ('new-done', 1, '')"
            )
        finally:
            await conn.close()
        retention = Retention(lambda: [store], 30 * DAY, batch=2, pause_s=0, clock=lambda: NOW)
        assert await retention.run_once() == len(old_settled)
        names = sorted(rec.task.id for rec in kept)
        assert await counts(url) == {
            "a2a_tasks": names,
            "a2a_push_configs": names,
            "a2a_retry_keys": ["new-done"],
            "a2a_events": ["new-done"],
        }
        for rec in kept:
            assert await store.load(ALICE, rec.task.id) is not None
        assert await store.count(BOB, TaskFilter()) == 0
        assert await store.lookup_message(ALICE, "m-new", "fp") == "new-done"
        assert await retention.run_once() == 0  # nothing left to remove
    finally:
        await store.aclose()


async def test_one_replica_at_a_time(postgres: LocalPostgres, tmp_path: Path) -> None:
    url = await fresh_database(postgres)
    store = PostgresTaskStore(url, box=SecretBox(tmp_path))
    other = await asyncpg.connect(url)
    try:
        await store.save(aged("old", pb.TASK_STATE_COMPLETED, 60, ALICE))
        await other.execute("SELECT pg_advisory_lock($1)", RETENTION_LOCK)  # a batch elsewhere
        assert await store.expire(int(NOW * 1e9), 10) == 0
        assert await store.load(ALICE, "old") is not None
        await other.execute("SELECT pg_advisory_unlock($1)", RETENTION_LOCK)
        assert await store.expire(int(NOW * 1e9), 10) == 1
        assert await store.load(ALICE, "old") is None
    finally:
        await other.close()
        await store.aclose()


@pytest.mark.parametrize("remove_files", [False, True])
async def test_inbox_files_go_only_when_asked(
    postgres: LocalPostgres, tmp_path: Path, remove_files: bool
) -> None:
    url = await fresh_database(postgres)
    workspace = tmp_path / "ws"
    inbox = workspace / "inbox" / "alice"
    inbox.mkdir(parents=True)
    (inbox / "report.pdf").write_bytes(b"%PDF")
    outside = workspace / "notes.txt"
    outside.write_text("keep me")
    store = PostgresTaskStore(url, box=SecretBox(workspace))
    owner = Caller(name="alice", workspace=str(workspace))
    try:
        rec = aged("with-file", pb.TASK_STATE_COMPLETED, 60, owner)
        await store.save(with_saved_files(rec, "inbox/alice/report.pdf", "inbox/../notes.txt"))
        retention = Retention(lambda: [store], DAY, files=remove_files, clock=lambda: NOW)
        assert await retention.run_once() == 1
        assert (inbox / "report.pdf").exists() is not remove_files
        assert outside.read_text() == "keep me"  # never outside the inbox
    finally:
        await store.aclose()


async def test_serve_applies_task_retention_to_the_postgres_store(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    WorkspaceLayout(workspace).state.mkdir(parents=True)
    flags = {
        "workspace": [str(workspace)], "port": 0, "grpc_port": 0, "faux": True,
        "store": "postgres", "database_url": "postgresql://a2a@127.0.0.1:9/none",
        "task_retention": "30d", "task_retention_files": True,
    }  # fmt: skip
    gateway = Gateway(resolve(flags, environ={}))  # nothing connects before start
    try:
        assert gateway.retention is not None
        assert list(gateway.retention.stores()) == [gateway.store]
        assert gateway.retention.max_age_s == 30 * DAY and gateway.retention.files
    finally:
        await gateway.stop()


async def test_a_pass_without_the_database_removes_nothing_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresTaskStore(
        f"postgresql://a2a@127.0.0.1:{free_port()}/none", box=SecretBox(tmp_path)
    )
    retention = Retention(lambda: [store], DAY, clock=lambda: NOW)
    assert await retention.run_once() == 0
    # An outage: its one line, not the pass's own.
    assert "the task database is unavailable (StoreUnavailable: cannot connect" in caplog.text
