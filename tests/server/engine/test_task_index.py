"""The workspace task index (``.a2a/index.sqlite3``): pages and counts as the files say,
rebuilt when missing or corrupt, kept in step with changes made behind the server's
back, retry keys across restarts; and the bounded caches (``ByteLRU``, the memory store).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.context import Caller
from a2a_gateway.server import task_index
from a2a_gateway.server.byte_lru import ByteLRU
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.memory_store import MemoryTaskStore
from a2a_gateway.server.task_index import INDEX_NAME, RECONCILE_WAIT_ROWS
from a2a_gateway.server.task_store import (
    TaskFilter,
    TaskRecord,
    TaskStore,
    TaskSummary,
    Window,
    select_page,
)
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import ALICE, BOB

BASE_MS = 1_700_000_000_000
STATES = (pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_INPUT_REQUIRED)


def record(n: int, owner: Caller = ALICE, *, ms: int | None = None, state: int = 0) -> TaskRecord:
    task = pb.Task(id=f"task-{n:04d}", context_id=f"ctx-{n % 3}")
    task.status.state = state or STATES[n % len(STATES)]  # type: ignore[assignment]
    stamp = BASE_MS + (n // 2 if ms is None else ms)  # pairs share a millisecond
    task.status.timestamp.seconds, millis = divmod(stamp, 1000)
    task.status.timestamp.nanos = millis * 1_000_000
    return TaskRecord(task, owner)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[WorkspaceTaskStore]:
    made = WorkspaceTaskStore(tmp_path)
    yield made
    await made.aclose()


async def fill(
    store: TaskStore, count: int, owner: Caller = ALICE, *, first: int = 0
) -> list[TaskRecord]:
    records = [record(n, owner) for n in range(first, first + count)]
    for rec in records:
        await store.save(rec)
    return records


def expected(records: list[TaskRecord], flt: TaskFilter) -> list[str]:
    """The order ListTasks has always used: status timestamp, then id, descending."""
    summaries = [TaskSummary.of(r.task) for r in records]
    return [s.task_id for s in sorted(filter(flt.matches, summaries), key=lambda s: s.position)][
        ::-1
    ]


async def walk(store: TaskStore, owner: Caller, flt: TaskFilter, size: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page, total, more = await select_page(store, owner, flt, cursor, size, {})
        assert total == await store.count(owner, flt)
        seen += [s.task_id for s in page]
        if not more:
            return seen
        cursor = page[-1].position


FILTERS = [
    TaskFilter(),
    TaskFilter(context_id="ctx-1"),
    TaskFilter(state=pb.TASK_STATE_FAILED),
    TaskFilter(context_id="ctx-2", state=pb.TASK_STATE_COMPLETED),
    TaskFilter(after_ns=(BASE_MS + 10) * 1_000_000),
    TaskFilter(context_id="ctx-0", after_ns=(BASE_MS + 5) * 1_000_000),
]


@pytest.mark.parametrize("kind", ["file", "memory"])
async def test_pages_counts_and_order_match_the_records(tmp_path: Path, kind: str) -> None:
    store: TaskStore = WorkspaceTaskStore(tmp_path) if kind == "file" else MemoryTaskStore()
    try:
        records = await fill(store, 40)
        await fill(store, 5, BOB, first=1000)  # another caller's tasks never show
        for flt in FILTERS:
            want = expected(records, flt)
            assert await store.count(ALICE, flt) == len(want)
            for size in (1, 7, 100):
                assert await walk(store, ALICE, flt, size) == want
    finally:
        await store.aclose()


async def test_replacing_a_task_moves_it_and_its_counts(store: WorkspaceTaskStore) -> None:
    records = await fill(store, 10)
    moved = records[0]
    moved.task.status.state = pb.TASK_STATE_CANCELED
    moved.task.status.timestamp.seconds += 100
    await store.save(moved)
    page = (await store.listing(ALICE, TaskFilter(), Window(None, 1)))[0]
    assert [s.task_id for s in page] == [moved.task.id]
    assert await store.count(ALICE, TaskFilter(state=pb.TASK_STATE_CANCELED)) == 1
    assert await store.count(ALICE, TaskFilter()) == 10


async def test_live_runs_override_their_stored_rows(store: WorkspaceTaskStore) -> None:
    records = await fill(store, 6)
    live_task = records[0].task  # stored as the oldest; live, it is the newest and working
    live = TaskSummary(live_task.id, live_task.context_id, pb.TASK_STATE_WORKING, 1 << 62)
    new = TaskSummary("never-stored", "ctx-9", pb.TASK_STATE_SUBMITTED, (1 << 62) - 1)
    overlay = {live.task_id: live, new.task_id: new}
    page, total, more = await select_page(store, ALICE, TaskFilter(), None, 3, overlay)
    assert [s.task_id for s in page] == [live.task_id, new.task_id, records[5].task.id]
    assert (total, more) == (7, True)
    working = TaskFilter(state=pb.TASK_STATE_WORKING)
    assert (await select_page(store, ALICE, working, None, 3, overlay))[1:] == (1, False)
    completed = TaskFilter(state=live_task.status.state)
    stored = await store.count(ALICE, completed)
    assert (await select_page(store, ALICE, completed, None, 50, overlay))[1] == stored - 1


def index_rows(workspace: Path) -> dict[str, tuple[int, int, int, int]]:
    with sqlite3.connect(WorkspaceLayout(workspace).task_index) as db:
        rows = db.execute("SELECT task_id, state, mtime, size, ino FROM tasks").fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def file_stamps(workspace: Path) -> dict[str, tuple[int, int, int]]:
    stamps = {}
    for entry in os.scandir(WorkspaceLayout(workspace).tasks):
        st = entry.stat()
        stamps[entry.name[:-5]] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return stamps


@pytest.mark.parametrize("damage", ["deleted", "corrupt", "foreign version"])
async def test_a_missing_or_corrupt_index_is_rebuilt_and_lists_the_same(
    tmp_path: Path, damage: str
) -> None:
    first = WorkspaceTaskStore(tmp_path)
    records = await fill(first, 30)
    await first.aclose()
    db = WorkspaceLayout(tmp_path).task_index
    if damage == "deleted":
        db.unlink()
    elif damage == "corrupt":
        db.write_bytes(b"this is not a database" * 200)
    else:
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE meta SET value = 999 WHERE key = 'version'")
    store = WorkspaceTaskStore(tmp_path)
    try:
        await store.index.opened()
        assert store.index.rebuilding
        await store.listing(ALICE, TaskFilter(), Window(None, 10))  # answers while rebuilding
        await store.index.wait_reconciled()
        assert not store.index.rebuilding
        for flt in FILTERS:
            assert await walk(store, ALICE, flt, 7) == expected(records, flt)
        assert {k: v[1:] for k, v in index_rows(tmp_path).items()} == file_stamps(tmp_path)
    finally:
        await store.aclose()


def write_by_hand(workspace: Path, rec: TaskRecord) -> Path:
    """A task file written by someone else (an editor, a restore), as ProtoJSON."""
    from a2a_gateway.server.file_store import encode_record

    path = WorkspaceLayout(workspace).tasks / f"{rec.task.id}.json"
    path.write_bytes(encode_record(rec))
    return path


def touch_folder(workspace: Path) -> None:
    """Give the folder an mtime after the server's last write (file-system timestamps
    are coarse: a hand change within a clock tick of the server's last write may look
    like the server's own, and only the periodic reconcile sees it)."""
    folder = WorkspaceLayout(workspace).tasks
    st = folder.stat()
    os.utime(folder, ns=(st.st_atime_ns, time.time_ns() + 1_000_000_000))


async def test_files_added_changed_or_removed_by_hand_are_noticed(
    store: WorkspaceTaskStore, tmp_path: Path
) -> None:
    records = await fill(store, 8)
    await store.index.wait_reconciled()  # the first pass over a new index
    assert not store.index.check_folder()  # only our own writes: nothing to reconcile
    added = record(100, ms=500, state=pb.TASK_STATE_COMPLETED)
    write_by_hand(tmp_path, added)
    removed = records[3]
    (WorkspaceLayout(tmp_path).tasks / f"{removed.task.id}.json").unlink()
    touch_folder(tmp_path)
    await store.before_listing(ALICE)  # the cheap check: a small index waits for it
    assert RECONCILE_WAIT_ROWS > 8
    now = [r for r in records if r is not removed] + [added]
    assert await walk(store, ALICE, TaskFilter(), 5) == expected(now, TaskFilter())
    # An edit in place keeps the folder's mtime: the periodic reconcile catches it.
    edited = records[0]
    edited.task.status.state = pb.TASK_STATE_REJECTED
    write_by_hand(tmp_path, edited)
    await store.before_listing(ALICE)
    store.index.request_reconcile()
    await store.index.wait_reconciled()
    assert await store.count(ALICE, TaskFilter(state=pb.TASK_STATE_REJECTED)) == 1
    # A file that became malformed is no longer listed.
    (WorkspaceLayout(tmp_path).tasks / f"{records[1].task.id}.json").write_text("{oops")
    store.index.request_reconcile()
    await store.index.wait_reconciled()
    assert await store.count(ALICE, TaskFilter()) == len(now) - 1


@pytest.mark.parametrize("closed", ["never started", "reconcile cancelled"])
async def test_a_reconcile_not_done_by_close_is_done_at_the_next_start(
    tmp_path: Path, closed: str
) -> None:
    first = WorkspaceTaskStore(tmp_path)
    records = await fill(first, 3)
    await first.index.wait_reconciled()  # the first pass over a new index
    await first.aclose()
    added = record(100, ms=500, state=pb.TASK_STATE_COMPLETED)
    write_by_hand(tmp_path, added)  # while no server runs
    touch_folder(tmp_path)
    second = WorkspaceTaskStore(tmp_path)  # wants a reconcile: the folder changed
    if closed == "reconcile cancelled":
        second.index.start()  # the reconcile is cancelled by the close before it ends
    await second.aclose()
    third = WorkspaceTaskStore(tmp_path)
    try:
        await third.before_listing(ALICE)
        await third.index.wait_reconciled()
        now = [*records, added]
        assert await walk(third, ALICE, TaskFilter(), 10) == expected(now, TaskFilter())
    finally:
        await third.aclose()


@pytest.mark.parametrize("noticed_by", ["the first listing", "the next start"])
async def test_files_added_by_hand_before_the_first_listing_are_noticed(
    tmp_path: Path, noticed_by: str
) -> None:
    first = WorkspaceTaskStore(tmp_path)
    records = await fill(first, 3)
    await first.index.wait_reconciled()  # the first pass over a new index
    await first.aclose()
    store = WorkspaceTaskStore(tmp_path)  # a clean index, as the folder is
    added = record(100, ms=500, state=pb.TASK_STATE_COMPLETED)
    write_by_hand(tmp_path, added)  # after the open, before any listing
    touch_folder(tmp_path)
    if noticed_by == "the next start":
        await store.aclose()
        store = WorkspaceTaskStore(tmp_path)
    try:
        await store.before_listing(ALICE)  # the cheap check: a small index waits for it
        now = [*records, added]
        assert await walk(store, ALICE, TaskFilter(), 10) == expected(now, TaskFilter())
    finally:
        await store.aclose()


async def test_a_reconcile_opens_no_database_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconcile (a ListTasks noticed a change) reads on the maintenance thread,
    its connection and temporary table included: nothing of it on the loop's thread."""
    store = WorkspaceTaskStore(tmp_path)  # opening the index is the loop's own, once
    try:
        await fill(store, 3)
        await store.index.wait_reconciled()
        real_connect = sqlite3.connect
        opened_on: list[int] = []

        def watched_connect(*args: object, **kwargs: object) -> sqlite3.Connection:
            opened_on.append(threading.get_ident())
            return real_connect(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(sqlite3, "connect", watched_connect)
        write_by_hand(tmp_path, record(100, ms=500))
        touch_folder(tmp_path)
        await store.before_listing(ALICE)  # starts the reconcile (and waits: small)
        await store.index.wait_reconciled()
        assert await store.count(ALICE, TaskFilter()) == 4
        assert opened_on  # the reconcile's scan has a connection of its own
        assert threading.get_ident() not in opened_on
    finally:
        await store.aclose()


def test_a_scan_whose_connection_does_not_open_leaves_nothing_half_made(tmp_path: Path) -> None:
    """A reconcile's scan whose connection cannot be opened (at the process's file limit,
    or here a folder that is not there: "unable to open database file") fails as that
    error, and the half-made scan is dropped cleanly: its finalizer does not fail on
    the folder handle it never opened."""
    missing = tmp_path / "not-there" / INDEX_NAME

    def never_parsed(task_id: str, path: str) -> task_index.Parsed:
        raise AssertionError("no file is read")

    with pytest.raises(sqlite3.OperationalError):
        task_index._Scan(str(missing), str(tmp_path), never_parsed)
    gc.collect()  # the scan's finalizer runs by here (an error in it fails the test)


async def test_a_file_that_cannot_be_read_for_now_keeps_its_row_and_retry_keys(
    tmp_path: Path,
) -> None:
    """A reconcile whose read of a task file fails for a passing reason (the process at
    its file limit, EMFILE: the parse's None) while the file is there leaves its row,
    and with it the task's retry keys; a file that is gone loses them."""
    first = WorkspaceTaskStore(tmp_path)
    kept, gone = record(1), record(2)
    for rec in (kept, gone):
        await first.save(rec)
        first.remember_message(ALICE, f"m-{rec.task.id}", "fp", rec.task.id)
    await first.index.wait_reconciled()
    await first.aclose()
    folder = WorkspaceLayout(tmp_path).tasks
    path = folder / f"{kept.task.id}.json"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # read again
    (folder / f"{gone.task.id}.json").unlink()

    def cannot_read_now(task_id: str, path: str) -> task_index.Parsed:
        return None  # "cannot be opened or read" (ParseFn)

    index = task_index.TaskIndex.shared(
        WorkspaceLayout(tmp_path).state / INDEX_NAME, folder, cannot_read_now
    )
    try:
        await index.reconcile()
        assert set(index_rows(tmp_path)) == {kept.task.id}
        assert index.find_message(ALICE, f"m-{kept.task.id}", "fp") == kept.task.id
        assert index.find_message(ALICE, f"m-{gone.task.id}", "fp") is None
    finally:
        await index.aclose()


async def test_the_periodic_reconcile_runs_on_its_own(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path, reconcile_interval_s=0.01)
    try:
        await fill(store, 3)
        write_by_hand(tmp_path, record(50, ms=900))
        async with asyncio.timeout(10):
            while await store.count(ALICE, TaskFilter()) != 4:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        await store.aclose()


async def test_a_scan_never_overwrites_a_newer_write(tmp_path: Path) -> None:
    first = WorkspaceTaskStore(tmp_path)
    records = await fill(first, 1200, owner=ALICE)
    await first.aclose()
    WorkspaceLayout(tmp_path).task_index.unlink()
    store = WorkspaceTaskStore(tmp_path)  # rebuilding from the files
    try:
        await store.listing(ALICE, TaskFilter(), Window(None, 1))  # starts the rebuild
        for rec in records:  # some files were read before this write, some after
            rec.task.status.state = pb.TASK_STATE_CANCELED
            await store.save(rec)
        await store.index.wait_reconciled()
        canceled = TaskFilter(state=pb.TASK_STATE_CANCELED)
        assert await store.count(ALICE, canceled) == 1200
        assert await store.count(ALICE, TaskFilter()) == 1200
    finally:
        await store.aclose()


async def test_retry_keys_survive_a_restart_and_leave_with_their_task(tmp_path: Path) -> None:
    first = WorkspaceTaskStore(tmp_path)
    rec = record(1)
    await first.save(rec)
    first.remember_message(ALICE, "m-1", "fp", rec.task.id)
    await first.aclose()
    store = WorkspaceTaskStore(tmp_path)
    try:
        assert await store.lookup_message(ALICE, "m-1", "fp") == rec.task.id
        assert store.find_message(ALICE, "m-1", "other") is None
        assert store.find_message(BOB, "m-1", "fp") is None
        (WorkspaceLayout(tmp_path).tasks / f"{rec.task.id}.json").unlink()
        store.index.request_reconcile()
        await store.index.wait_reconciled()
        assert store.find_message(ALICE, "m-1", "fp") is None
    finally:
        await store.aclose()


@pytest.mark.parametrize("index_lost", ["uncommitted", "deleted"])
async def test_retry_keys_the_index_lost_come_back_from_the_task_files(
    tmp_path: Path, index_lost: str
) -> None:
    """The rows of files written just before the process died were not committed
    (their keys were queued before them: neither is in; the index is not marked
    clean), or the index was removed: the first lookup after the restart finds the
    key the task file carries, and the index holds it again."""
    first = WorkspaceTaskStore(tmp_path)
    kept, later = record(1), record(2)
    kept.retry_keys.append(("m-1", "fp"))
    await first.save(kept)
    later.retry_keys += [("m-2", "fp"), ("m-3", "fp")]  # created, then continued
    await first.save(later)
    await first.aclose()
    db_path = WorkspaceLayout(tmp_path).state / INDEX_NAME
    if index_lost == "deleted":
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{db_path}{suffix}")
    else:
        with contextlib.closing(sqlite3.connect(db_path)) as db, db:
            db.execute("DELETE FROM tasks")  # their retry keys go with them (a trigger)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('clean', 0)")
    store = WorkspaceTaskStore(tmp_path)
    try:
        assert await store.lookup_message(ALICE, "m-1", "fp") == kept.task.id
        assert await store.lookup_message(ALICE, "m-3", "fp") == later.task.id
        assert await store.lookup_message(BOB, "m-2", "fp") is None  # the file's owner only
        loaded = await store.load(ALICE, later.task.id)
        assert loaded is not None and loaded.retry_keys == [("m-2", "fp"), ("m-3", "fp")]
    finally:
        await store.aclose()
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        rows = sorted(db.execute("SELECT message_id, task_id FROM retry"))
    assert rows == [("m-1", kept.task.id), ("m-2", later.task.id), ("m-3", later.task.id)]


async def test_an_index_held_locked_by_another_process_never_stalls_the_loop(
    tmp_path: Path,
) -> None:
    """The first request of a workspace opens its index. When another process holds
    the database locked, the open waits for it on the index's writer thread, not on
    the event loop: the loop keeps running, the workspace's files are saved and read,
    another workspace is listed; the open (and the listing waiting for it) completes
    once the lock is released."""
    first = WorkspaceTaskStore(tmp_path / "a")
    await first.save(record(1))
    await first.aclose()
    other = WorkspaceTaskStore(tmp_path / "b")
    await other.save(record(2, BOB))
    locked, release = threading.Event(), threading.Event()

    def hold_locked() -> None:  # as another process would, with its own connection
        conn = sqlite3.connect(
            WorkspaceLayout(tmp_path / "a").state / INDEX_NAME, isolation_level=None
        )
        try:
            conn.execute("BEGIN EXCLUSIVE")
            locked.set()
            release.wait(120)
            conn.execute("COMMIT")
        finally:
            conn.close()

    holder = threading.Thread(target=hold_locked)
    holder.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while ticks < 50:
            ticks += 1
            await asyncio.sleep(0.001)

    try:
        assert await asyncio.to_thread(locked.wait, 30)
        ticking = asyncio.ensure_future(ticker())
        store = WorkspaceTaskStore(tmp_path / "a")  # the workspace's first request
        try:
            listing = asyncio.ensure_future(store.listing(ALICE, TaskFilter(), Window(None, 10)))
            await ticking  # the loop runs other work while the open waits for the lock
            assert ticks == 50 and not listing.done()
            await store.save(record(3))
            loaded = await store.load(ALICE, "task-0003")
            assert loaded is not None and loaded.task.id == "task-0003"
            assert [s.task_id for s in await other.summaries(BOB)] == ["task-0002"]
            assert not listing.done()  # the lock is still held
            release.set()
            async with asyncio.timeout(60):
                page, total, _ = await listing
            assert (sorted(s.task_id for s in page), total) == (["task-0001", "task-0003"], 2)
        finally:
            release.set()
            await store.aclose()
    finally:
        release.set()
        await asyncio.to_thread(holder.join)
        await other.aclose()


async def test_memory_store_is_bounded_by_count_and_bytes() -> None:
    by_count = MemoryTaskStore(max_tasks=5)
    records = await fill(by_count, 8)
    assert len(by_count) == 5
    assert await by_count.load(ALICE, records[0].task.id) is None  # the oldest went
    assert await by_count.load(ALICE, records[7].task.id) is not None
    big = MemoryTaskStore(max_bytes=3 * 1024 * 1024)
    for n in range(5):
        rec = record(n)
        rec.task.history.add(message_id=f"m{n}", parts=[pb.Part(raw=b"x" * 1024 * 1024)])
        await big.save(rec)
    assert len(big) == 2
    keys = MemoryTaskStore(retry_keys=3)
    for n in range(5):
        keys.remember_message(ALICE, f"m-{n}", "fp", f"t-{n}")
    assert keys.find_message(ALICE, "m-0", "fp") is None
    assert keys.find_message(ALICE, "m-4", "fp") == "t-4"


def test_byte_lru_evicts_under_byte_pressure_oldest_first() -> None:
    cache: ByteLRU[str, str] = ByteLRU(max_entries=100, max_bytes=1000)
    for n in range(5):
        cache.put(f"k{n}", "v", 300)
    assert [k for k in ("k0", "k1", "k2", "k3", "k4") if k in cache] == ["k2", "k3", "k4"]
    assert cache.bytes == 900 and cache.evicted == 2
    cache.get("k2")  # used: now the newest
    cache.put("k5", "v", 300)
    assert "k3" not in cache and "k2" in cache
    cache.put("huge", "v", 5000)  # larger than the budget: not kept, nothing evicted
    assert "huge" not in cache and len(cache) == 3
    cache.put("k2", "v", 100)  # replacing gives back the old size
    assert cache.bytes == 700
    assert cache.pop("k2") == "v" and cache.bytes == 600


def test_byte_lru_clear_drops_everything_and_tells_on_drop() -> None:
    for tally in (None, []):
        cache: ByteLRU[str, str] = ByteLRU(10, 1000, None if tally is None else tally.append)
        cache.put("a", "1", 10)
        cache.put("b", "2", 20)
        cache.clear()
        assert len(cache) == 0 and cache.bytes == 0 and cache.get("a") is None
        assert tally is None or sorted(tally) == ["1", "2"]
        cache.put("c", "3", 30)  # usable after
        assert cache.get("c") == "3" and cache.bytes == 30


async def test_the_record_cache_has_a_byte_budget(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path, cache_bytes=2 * 1024 * 1024)
    try:
        for n in range(6):
            rec = record(n)
            rec.task.history.add(message_id=f"m{n}", parts=[pb.Part(text="x" * 700_000)])
            await store.save(rec)
            assert await store.load(ALICE, rec.task.id) is not None
        assert len(store._cache) == 2 and store._cache.bytes <= 2 * 1024 * 1024
    finally:
        await store.aclose()


async def test_index_file_is_wal_and_in_the_workspace(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path)
    await store.index.opened()  # on the index's writer thread
    with sqlite3.connect(WorkspaceLayout(tmp_path).task_index) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    await store.aclose()


async def _wal_frames_after_a_rebuild(workspace: Path) -> int:
    """Rebuild the index of ``workspace`` from its files; the frames its WAL then holds."""
    WorkspaceLayout(workspace).task_index.unlink()
    store = WorkspaceTaskStore(workspace)
    try:
        await store.listing(ALICE, TaskFilter(), Window(None, 1))
        await store.index.wait_reconciled()
        await store.index.flushed()
        with contextlib.closing(sqlite3.connect(WorkspaceLayout(workspace).task_index)) as db:
            _, frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (await store.listing(ALICE, TaskFilter(), Window(None, 1)))[1] == 3000
    finally:
        await store.aclose()
    return int(frames)


async def test_the_writer_checkpoints_so_a_rebuild_keeps_the_wal_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild writes rows as fast as it can: the writer's own checkpoints keep the
    WAL to about the last transaction (checkpoints from another thread never caught
    up, and a million files left a WAL of gigabytes); SQLite's "never" (0) keeps all."""
    store = WorkspaceTaskStore(tmp_path)
    for n in range(3000):
        await store.save(record(n))
    await store.aclose()
    monkeypatch.setattr(task_index, "CHECKPOINT_PAGES", 0)
    unchecked = await _wal_frames_after_a_rebuild(tmp_path)
    monkeypatch.setattr(task_index, "CHECKPOINT_PAGES", 8)
    checked = await _wal_frames_after_a_rebuild(tmp_path)
    assert checked * 3 < unchecked, (checked, unchecked)


async def _committed(store: WorkspaceTaskStore) -> None:
    """Until every queued index write is committed and taken in on the loop (the keys
    it carried are then read from the database, no longer from memory)."""
    await store.index.flushed()
    async with asyncio.timeout(5):
        while store.index._pending_retry:  # noqa: ASYNC110 (the batch's callback)
            await asyncio.sleep(0.001)


async def test_lookups_in_one_read_transaction_see_every_committed_key(
    store: WorkspaceTaskStore,
) -> None:
    """Lookups made between two batches share one read transaction of the loop's
    connection; it ends before the next batch goes to the writer, so a key committed
    by that batch is found once its in-memory copy is dropped."""
    await store.index.opened()
    for round_ in range(3):
        for n in range(3):  # a second lookup before the next batch: the snapshot
            assert store.find_message(ALICE, f"new-{round_}-{n}", "fp") is None
        store.remember_message(ALICE, f"m-{round_}", "fp", f"task-{round_}")
        await _committed(store)
        for done in range(round_ + 1):
            assert store.find_message(ALICE, f"m-{done}", "fp") == f"task-{done}"


async def test_lookups_between_batches_leave_the_wal_restarting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lookups' read transaction is never held while a batch commits, so the
    writer's checkpoint backfills the whole WAL and the next batch starts it over:
    the WAL file stays about as small as a checkpoint interval's frames."""
    monkeypatch.setattr(task_index, "CHECKPOINT_PAGES", 8)
    store = WorkspaceTaskStore(tmp_path)
    try:
        await store.index.opened()
        for n in range(300):
            for k in range(3):
                store.find_message(ALICE, f"miss-{n}-{k}", "fp")
            await store.save(record(n))
            store.remember_message(ALICE, f"m-{n}-{'x' * 400}", "fp", f"task-{n:04d}")
            await _committed(store)
        wal = os.stat(f"{WorkspaceLayout(tmp_path).task_index}-wal").st_size
        assert wal < 40 * 4096 * 2, wal  # not 300 batches' frames (about 1,200 pages)
        assert store.find_message(ALICE, f"m-299-{'x' * 400}", "fp") == "task-0299"
    finally:
        await store.aclose()
