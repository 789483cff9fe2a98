"""Task retention (``--task-retention``): exactly the settled tasks older than the
maximum age go (file, index row, retry keys; inbox files only when asked), in batches;
interrupted and running tasks never expire by age."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.server.file_store import SAVED_AS_KEY, WorkspaceTaskStore, encode_record
from a2a_gateway.server.retention import Retention, parse_duration
from a2a_gateway.server.task_store import TaskFilter, TaskRecord
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import ALICE, BOB

DAY = 86_400
NOW = 1_800_000_000.0


def aged(task_id: str, state: int, age_days: float, owner: object = ALICE) -> TaskRecord:
    task = pb.Task(id=task_id, context_id="ctx")
    task.status.state = state  # type: ignore[assignment]
    ms = int((NOW - age_days * DAY) * 1000)
    task.status.timestamp.seconds, millis = divmod(ms, 1000)
    task.status.timestamp.nanos = millis * 1_000_000
    return TaskRecord(task, owner)  # type: ignore[arg-type]


def with_saved_files(rec: TaskRecord, *relatives: str) -> TaskRecord:
    """``rec`` with a user message whose file parts were saved at ``relatives``."""
    message = rec.task.history.add(message_id="m", role=pb.ROLE_USER)
    for relative in relatives:
        part = message.parts.add(url="file:///x")
        part.metadata[SAVED_AS_KEY] = relative
    return rec


def task_path(workspace: Path, task_id: str) -> Path:
    return WorkspaceLayout(workspace).tasks / f"{task_id}.json"


async def test_only_settled_tasks_older_than_the_age_are_removed(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path)
    try:
        old_settled = [
            aged("old-done", pb.TASK_STATE_COMPLETED, 40),
            aged("old-failed", pb.TASK_STATE_FAILED, 31),
            aged("old-canceled", pb.TASK_STATE_CANCELED, 365),
            aged("old-rejected", pb.TASK_STATE_REJECTED, 90),
            aged("bobs-old", pb.TASK_STATE_COMPLETED, 50, BOB),
        ]
        kept = [
            aged("new-done", pb.TASK_STATE_COMPLETED, 29),
            aged("old-asking", pb.TASK_STATE_INPUT_REQUIRED, 400),
            aged("old-auth", pb.TASK_STATE_AUTH_REQUIRED, 400),
            aged("old-working", pb.TASK_STATE_WORKING, 400),
        ]
        for rec in old_settled + kept:
            await store.save(rec)
        store.remember_message(ALICE, "m-old", "fp", "old-done")
        store.remember_message(ALICE, "m-new", "fp", "new-done")
        retention = Retention(lambda: [store], 30 * DAY, batch=2, pause_s=0, clock=lambda: NOW)
        assert await retention.run_once() == len(old_settled)
        for rec in old_settled:
            assert not task_path(tmp_path, rec.task.id).exists()
        for rec in kept:
            assert task_path(tmp_path, rec.task.id).exists()
            assert await store.load(ALICE, rec.task.id) is not None
        assert await store.count(ALICE, TaskFilter()) == len(kept)
        assert await store.count(BOB, TaskFilter()) == 0
        assert store.find_message(ALICE, "m-old", "fp") is None
        assert store.find_message(ALICE, "m-new", "fp") == "new-done"
        assert await retention.run_once() == 0  # nothing left to remove
    finally:
        await store.aclose()


@pytest.mark.parametrize("remove_files", [False, True])
async def test_inbox_files_go_only_when_asked(tmp_path: Path, remove_files: bool) -> None:
    store = WorkspaceTaskStore(tmp_path)
    inbox = tmp_path / "inbox" / "alice"
    inbox.mkdir(parents=True)
    (inbox / "report.pdf").write_bytes(b"%PDF")
    outside = tmp_path / "notes.txt"
    outside.write_text("keep me")
    (inbox / "link.txt").symlink_to(outside)
    try:
        rec = aged("with-file", pb.TASK_STATE_COMPLETED, 60)
        saved = ("inbox/alice/report.pdf", "inbox/../notes.txt", "inbox/alice/link.txt")
        await store.save(with_saved_files(rec, *saved))
        retention = Retention(lambda: [store], DAY, files=remove_files, clock=lambda: NOW)
        assert await retention.run_once() == 1
        assert (inbox / "report.pdf").exists() is not remove_files
        assert outside.read_text() == "keep me"  # never outside the inbox
        assert (inbox / "link.txt").is_symlink()  # a symlink is not followed
    finally:
        await store.aclose()


async def test_a_task_written_since_it_was_indexed_is_left_for_the_next_pass(
    tmp_path: Path,
) -> None:
    store = WorkspaceTaskStore(tmp_path)
    try:
        rec = aged("busy", pb.TASK_STATE_COMPLETED, 60)
        await store.save(rec)
        # The first pass over the new index must be over, or it may index the change.
        await store.index.wait_reconciled()
        path = task_path(tmp_path, "busy")
        # Changed behind the index's back, in place (same inode), into a running task: a
        # pass that acts on the row it indexed before must leave the file (its stamp
        # differs), and one that re-indexed the file first must keep it too (it runs).
        # (An edit that kept it settled and old made the test racy: a reconcile that
        # caught it first could rightly expire it.)
        path.write_bytes(encode_record(aged("busy", pb.TASK_STATE_WORKING, 0)))
        assert await store.expire(int(NOW * 1e9), 10) == 0  # considered, not removed
        assert path.exists()
    finally:
        await store.aclose()


@pytest.mark.server_fault  # the failed index write is logged with its traceback
async def test_an_owner_whose_index_write_failed_still_has_its_tasks_expired(
    tmp_path: Path,
) -> None:
    """A failed index write (disk full, a lock held too long) is repaired by the
    reconcile it starts, the owner's row included: retention finds its tasks."""
    store = WorkspaceTaskStore(tmp_path)
    try:
        await store.before_listing(ALICE)
        await store.index.wait_reconciled()  # the first pass over the new, empty index
        index = WorkspaceLayout(tmp_path).task_index
        with contextlib.closing(sqlite3.connect(index)) as db:
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON owners"
                " BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
            db.commit()
        await store.save(aged("old", pb.TASK_STATE_COMPLETED, 60))
        await store.index.flushed()  # its batch (owner and task rows) failed: a reconcile
        with contextlib.closing(sqlite3.connect(index)) as db:
            db.execute("DROP TRIGGER refuse")  # before the reconcile writes (no await yet)
            db.commit()
        await store.index.wait_reconciled()
        assert await store.count(ALICE, TaskFilter()) == 1
        assert await store.expire(int(NOW * 1e9) - 30 * DAY * 10**9, 10) == 1
        assert not task_path(tmp_path, "old").exists()
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * DAY), ("12h", 43_200), ("90m", 5400), ("45s", 45), ("2w", 14 * DAY), ("10", 10)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "30x", "-1d", "0", "1.5.2h", "30 days"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


async def test_a_removed_tasks_event_log_goes_with_it(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path)
    try:
        for task_id, age in (("old-streamed", 40), ("new-streamed", 1)):
            await store.save(aged(task_id, pb.TASK_STATE_COMPLETED, age))
            store.start_event_log(ALICE, task_id)
            store.log_event(task_id, pb.StreamResponse(), None)
            store.close_event_log(task_id)
        await store.event_log.flush()
        tasks = WorkspaceLayout(tmp_path).tasks
        (tasks / "old-streamed.events").write_bytes(b"a log of an earlier version")
        retention = Retention(lambda: [store], 30 * DAY, clock=lambda: NOW)
        assert await retention.run_once() == 1
        assert not (tasks / "old-streamed.events").exists()
        assert await store.event_bounds(ALICE, "old-streamed") is None
        assert await store.event_bounds(ALICE, "new-streamed") == (1, 1)
    finally:
        await store.aclose()
    # Also after a restart: the old task's frames share a segment with the new one's,
    # which stays, but its task file is gone, so they are not indexed again (a segment
    # none of whose frames is kept is removed: tests/server/test_event_log.py).
    store = WorkspaceTaskStore(tmp_path)
    try:
        assert await store.event_bounds(ALICE, "old-streamed") is None
        assert await store.event_bounds(ALICE, "new-streamed") == (1, 1)
    finally:
        await store.aclose()
