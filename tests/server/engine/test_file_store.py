"""The workspace file store: atomic files, fresh reads, malformed files, id validation,
routing by workspace, and lazy restart recovery (a new store and engine on one folder)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import shutil
import signal
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol import codec, errors, proto_dict
from a2a_gateway.protocol.context import ANONYMOUS, Caller
from a2a_gateway.protocol.proto_dict import recent_task_json
from a2a_gateway.server import file_store
from a2a_gateway.server.engine import SERVER_RESTARTED, TaskEngine, records
from a2a_gateway.server.file_store import (
    READ_THREADS,
    WorkspaceTaskStore,
    WorkspaceTaskStores,
    decode_record,
    owner_from_document,
)
from a2a_gateway.server.file_store.task_file import encode_record, task_line
from a2a_gateway.server.task_store import TaskFilter, TaskRecord, Window
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import ALICE, BOB, collect, ctx, request, send, state_name, status_text


@pytest.fixture
async def files(tmp_path: Path) -> AsyncIterator[TaskEngine]:
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(tmp_path))
    yield engine
    await engine.aclose()


def task_file(workspace: Path, task_id: str) -> Path:
    return WorkspaceLayout(workspace).tasks / f"{task_id}.json"


async def get(engine: TaskEngine, task_id: str) -> pb.Task:
    return await engine.get_task(pb.GetTaskRequest(id=task_id), ctx())


async def test_one_json_file_per_task_written_atomically(files: TaskEngine, tmp_path: Path) -> None:
    task = await send(files, "hello")
    path = task_file(tmp_path, task.id)
    document = json.loads(path.read_bytes())
    assert document["version"] == 1
    assert document["owner"] == {"name": ALICE.name, "workspace": ALICE.workspace}
    assert document["task"]["id"] == task.id
    assert document["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert document["task"]["artifacts"][0]["parts"] == [{"text": "hello"}]
    assert document["pushConfigs"] == []
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp files
    assert path.stat().st_mode & 0o777 == 0o600


async def test_edits_and_removals_on_disk_apply_to_the_next_request(
    files: TaskEngine, tmp_path: Path
) -> None:
    task = await send(files, "hello")
    assert [p.text for p in (await get(files, task.id)).artifacts[0].parts] == ["hello"]
    path = task_file(tmp_path, task.id)
    document = json.loads(path.read_bytes())
    document["task"]["artifacts"][0]["parts"] = [{"text": "edited by hand, a longer text"}]
    path.write_text(json.dumps(document))
    assert [p.text for p in (await get(files, task.id)).artifacts[0].parts] == [
        "edited by hand, a longer text"
    ]
    listed = await files.list_tasks(pb.ListTasksRequest(), ctx())
    assert [t.id for t in listed.tasks] == [task.id]
    path.unlink()
    with pytest.raises(errors.TaskNotFoundError):
        await get(files, task.id)
    assert (await files.list_tasks(pb.ListTasksRequest(), ctx())).total_size == 0


async def test_a_task_read_from_its_file_is_printed_from_the_file_s_json(
    files: TaskEngine, tmp_path: Path
) -> None:
    """GetTask of a task read from its file answers with the file's task JSON when the
    file holds it as the encoder writes it (edited or not), and with the task encoded
    anew when the file holds another shape (keys reordered, a default written out) or
    the answer is not the whole task (historyLength): the JSON of the answer's task
    either way."""
    task = await send(files, "hello")
    path = task_file(tmp_path, task.id)
    document = orjson.loads(path.read_bytes())
    document["task"]["artifacts"][0]["parts"][0]["text"] = "edited"  # the encoder's shape
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    got = await get(files, task.id)
    assert got.artifacts[0].parts[0].text == "edited"
    assert recent_task_json(got) == orjson.dumps(document["task"])  # the file's, kept
    assert codec.to_json(got) == orjson.dumps(document["task"])

    request = pb.GetTaskRequest(id=task.id, history_length=0)
    short = await files.get_task(request, ctx())
    assert list(short.history) == [] and recent_task_json(short) is None
    assert codec.to_json(short) == orjson.dumps(codec.to_dict(short))

    reordered = {key: document["task"][key] for key in reversed(document["task"])}
    reordered["artifacts"][0]["name"] = ""  # a default written out
    path.write_bytes(orjson.dumps({**document, "task": reordered}))
    got = await get(files, task.id)
    assert got.artifacts[0].name == "" and recent_task_json(got) is None
    assert codec.to_json(got) == orjson.dumps(codec.to_dict(got)) != orjson.dumps(reordered)


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"[]",
        b'{"owner": {"name": "alice", "workspace": "/ws/one"}, "task": {"id": 5}}',
        b'{"owner": {"name": "alice", "workspace": "/ws/one"}, "task": {"id": "other-id",'
        b' "status": {"state": "TASK_STATE_COMPLETED"}}}',
        b'{"owner": {"name": "alice", "workspace": "/ws/one"}, "task": {"id": "TID"}}',
        b'{"task": {"id": "TID", "status": {"state": "TASK_STATE_COMPLETED"}}}',
        b"",
    ],
)
async def test_a_malformed_file_reads_as_task_not_found(
    files: TaskEngine, tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    task = await send(files, "hello")
    path = task_file(tmp_path, task.id)
    path.write_bytes(content.replace(b"TID", task.id.encode()))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            with pytest.raises(errors.TaskNotFoundError):
                await get(files, task.id)
        listed = await files.list_tasks(pb.ListTasksRequest(), ctx())
    assert listed.total_size == 0
    # (WARNING only: the test's folder, named in other lines too, says "malformed")
    warnings = [
        r for r in caplog.records if r.levelno >= logging.WARNING and "malformed" in r.getMessage()
    ]
    assert len(warnings) == 1  # once per version of the file, naming its path
    assert str(path) in warnings[0].getMessage()


async def test_a_file_owned_by_another_caller_is_not_found(
    files: TaskEngine, tmp_path: Path
) -> None:
    task = await send(files, "hello")
    path = task_file(tmp_path, task.id)
    document = json.loads(path.read_bytes())
    document["owner"]["name"] = BOB.name
    path.write_text(json.dumps(document))
    with pytest.raises(errors.TaskNotFoundError):
        await get(files, task.id)
    found = await files.get_task(pb.GetTaskRequest(id=task.id), ctx(BOB))
    assert found.id == task.id


async def test_task_ids_are_validated_before_they_touch_a_path(
    files: TaskEngine, tmp_path: Path
) -> None:
    task = await send(files, "hello")
    record = json.loads(task_file(tmp_path, task.id).read_bytes())
    # Valid records placed where a crafted id would reach them.
    (WorkspaceLayout(tmp_path).state / "outside.json").write_text(json.dumps(record))
    (tmp_path / "outside.json").write_text(json.dumps(record))
    link = task_file(tmp_path, "linked")
    link.symlink_to(tmp_path / "outside.json")
    for task_id in ("../outside", "../../outside", "/etc/passwd", "linked", "a\x00b", ".", ""):
        with pytest.raises(errors.TaskNotFoundError):
            await get(files, task_id)


async def test_a_listed_task_unread_for_lack_of_file_descriptors_keeps_its_row(
    tmp_path: Path,
) -> None:
    """ListTasks refreshes the rows of listed tasks that did not load: one whose file
    could not be opened just now (the process at its file limit) but is there keeps
    its row and retry keys; one whose file is gone loses them."""
    store = WorkspaceTaskStore(tmp_path)
    try:
        done = pb.TASK_STATE_COMPLETED
        kept, gone = _versioned("t-kept", done, "k"), _versioned("t-gone", done, "g")
        for rec in (kept, gone):
            await store.save(rec)
            store.remember_message(ALICE, f"m-{rec.task.id}", "fp", rec.task.id)
        task_file(tmp_path, "t-gone").unlink()
        # The index opens on its writer thread, and a new index's first reconcile opens
        # a connection of its own on the maintenance thread: both done before the limit,
        # which is the whole process's (else one of them may be what meets it).
        await store.index.opened()
        await store.index.wait_reconciled()
        await store.index.flushed()  # nor is a batch of the saves above in flight then
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest_free = os.open("/", os.O_RDONLY)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # EMFILE from here
        try:
            await store.refresh(ALICE, ["t-kept", "t-gone"])  # no await inside: no other work
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert [s.task_id for s in await store.summaries(ALICE)] == ["t-kept"]
        assert store.find_message(ALICE, "m-t-kept", "fp") == "t-kept"
        assert store.find_message(ALICE, "m-t-gone", "fp") is None
    finally:
        await store.aclose()


async def test_stale_temp_files_are_removed_by_the_first_reconcile(tmp_path: Path) -> None:
    folder = WorkspaceLayout(tmp_path).tasks
    folder.mkdir(parents=True)
    (folder / ".abc.123.4.tmp").write_text("half a record")  # another (killed) process's
    ours = folder / f".abc.{os.getpid()}.5.tmp"
    ours.write_text("a write in flight")
    store = WorkspaceTaskStore(tmp_path)
    try:
        await store.summaries(ALICE)  # a new index: the first pass runs at start
        await store.index.wait_reconciled()
        assert list(folder.iterdir()) == [ours]
    finally:
        await store.aclose()


async def test_an_empty_task_file_left_by_a_killed_write_reads_as_absent_and_is_removed(
    tmp_path: Path,
) -> None:
    """A new task file is created in place, then written: a process killed between the
    two leaves an empty file (its task was never answered). It reads as no such task,
    is not listed, and the next start's reconcile removes it; whole files stay."""
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(tmp_path))
    try:
        kept = await send(engine, "hi")
    finally:
        await engine.aclose()
    # What the killed process left: the creation done, the write never (and no row),
    # and its index not closed cleanly (the folder's mtime may not have moved: a clock
    # tick is coarser than this test).
    task_file(tmp_path, "t-empty").write_bytes(b"")
    with contextlib.closing(sqlite3.connect(WorkspaceLayout(tmp_path).task_index)) as db:
        db.execute("UPDATE meta SET value = 0 WHERE key = 'clean'")
        db.commit()
    store = WorkspaceTaskStore(tmp_path)
    engine = TaskEngine(FauxAgent(), store)  # the restart
    try:
        with pytest.raises(errors.TaskNotFoundError):
            await get(engine, "t-empty")
        listed = await engine.list_tasks(pb.ListTasksRequest(), ctx())
        assert [t.id for t in listed.tasks] == [kept.id] and listed.total_size == 1
        await store.index.wait_reconciled()  # (owed at start: ListTasks waited for it)
        assert sorted(p.name for p in task_file(tmp_path, "x").parent.iterdir()) == [
            f"{kept.id}.json"
        ]
        assert (await get(engine, kept.id)).status.state == pb.TASK_STATE_COMPLETED
        again = await send(engine, "hi")  # new files are created in place as before
        assert task_file(tmp_path, again.id).stat().st_size > 0
    finally:
        await engine.aclose()


async def test_a_task_written_again_is_replaced_whole_also_when_its_file_is_gone(
    tmp_path: Path,
) -> None:
    """A task written unfinished is most likely written again: that write replaces the
    file at once; it still lands when the file was removed meanwhile."""
    store = WorkspaceTaskStore(tmp_path)

    async def text(task_id: str) -> str:
        loaded = await store.load(ALICE, task_id)
        assert loaded is not None
        return loaded.task.artifacts[0].parts[0].text

    try:
        await store.save(_versioned("t-1", pb.TASK_STATE_WORKING, "one"))
        await store.save(_versioned("t-1", pb.TASK_STATE_COMPLETED, "two"))
        assert await text("t-1") == "two"
        await store.save(_versioned("t-2", pb.TASK_STATE_WORKING, "one"))
        task_file(tmp_path, "t-2").unlink()  # removed behind the store's back
        await store.save(_versioned("t-2", pb.TASK_STATE_INPUT_REQUIRED, "two"))
        assert await text("t-2") == "two"
        await store.save(_versioned("t-1", pb.TASK_STATE_FAILED, "three"))  # finished before
        assert await text("t-1") == "three"
        folder = task_file(tmp_path, "x").parent
        assert sorted(p.name for p in folder.iterdir()) == ["t-1.json", "t-2.json"]
    finally:
        await store.aclose()


async def test_a_new_task_file_whose_write_fails_is_not_left_behind(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path)
    try:
        await store.save(_versioned("t-1", pb.TASK_STATE_COMPLETED, "one"))
        # The limit is the whole process's: the index's writes and the new index's first
        # reconcile (its temporary table is a file) are done before it.
        await store.index.wait_reconciled()
        await store.index.flushed()
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, hard))  # EFBIG past 100 bytes
        try:  # (the save does not suspend: nothing else writes meanwhile)
            with pytest.raises(OSError):
                await store.save(_versioned("t-2", pb.TASK_STATE_COMPLETED, "two"))
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
        assert sorted(p.name for p in task_file(tmp_path, "x").parent.iterdir()) == ["t-1.json"]
        assert await store.load(ALICE, "t-2") is None
    finally:
        await store.aclose()


async def test_a_task_file_written_after_the_scan_saw_it_empty_is_kept(tmp_path: Path) -> None:
    """The reconcile removes an empty file only if it is still empty when its change
    is applied on the event loop (a creation of this process is done by then)."""
    store = WorkspaceTaskStore(tmp_path)
    try:
        await store.save(_versioned("t-1", pb.TASK_STATE_COMPLETED, "one"))
        await store.index.flushed()
        path = task_file(tmp_path, "t-1")
        assert not store.index._remove_empty("t-1")  # whole: kept
        assert path.stat().st_size > 0
        path.write_bytes(b"")
        assert store.index._remove_empty("t-1")
        assert not path.exists()
    finally:
        await store.aclose()


async def test_fsync_store_writes_the_same_files(tmp_path: Path) -> None:
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(tmp_path, fsync=True))
    try:
        task = await send(engine, "durable")
        decoded, owner, _ = decode_record(task_file(tmp_path, task.id).read_bytes(), task.id)
        assert decoded == task and owner == ALICE
    finally:
        await engine.aclose()


def _versioned(task_id: str, state: int, text: str) -> TaskRecord:
    task = pb.Task(id=task_id, context_id="c-1")
    task.status.state = state  # type: ignore[assignment]
    task.status.timestamp.FromNanoseconds(1_000_000_000 + state)
    task.artifacts.add(artifact_id="a", parts=[pb.Part(text=text)])
    return TaskRecord(task, ALICE)


async def test_fsync_writes_run_off_the_event_loop_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fsync every save's two fsyncs (the file, the folder) run off the loop's
    thread; concurrent saves of one task land in the order they were asked for, each
    durable when its save returns, and the index row follows the last one."""
    real_fsync = os.fsync
    fsync_threads: list[int] = []

    def watched_fsync(fd: int) -> None:
        fsync_threads.append(threading.get_ident())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", watched_fsync)
    store = WorkspaceTaskStore(tmp_path, fsync=True)
    try:
        await store.save(_versioned("t-1", pb.TASK_STATE_SUBMITTED, "first"))
        assert len(fsync_threads) == 2  # the new file, then its folder
        assert threading.get_ident() not in fsync_threads

        states = [pb.TASK_STATE_WORKING, pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_COMPLETED]
        saves = [store.save(_versioned("t-1", s, pb.TaskState.Name(s))) for s in states]
        await asyncio.gather(*saves)
        assert threading.get_ident() not in fsync_threads
        on_disk, _, _ = decode_record(task_file(tmp_path, "t-1").read_bytes(), "t-1")
        assert on_disk.status.state == pb.TASK_STATE_COMPLETED
        assert [(s.task_id, s.state) for s in await store.summaries(ALICE)] == [
            ("t-1", pb.TASK_STATE_COMPLETED)
        ]
    finally:
        await store.aclose()


async def test_a_cancelled_fsync_save_still_lands_with_its_index_row(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path, fsync=True)
    try:
        await store.before_listing(ALICE)  # the first pass over the new, empty index
        await store.index.wait_reconciled()  # (so no reconcile indexes a file for it)
        saving = asyncio.create_task(store.save(_versioned("t-2", pb.TASK_STATE_WORKING, "w")))
        await asyncio.sleep(0)  # the write is on the writer thread now
        saving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await saving
        # A save asked later returns after the cancelled one landed (one writer thread):
        # the cancelled one's row is in, as its file is.
        await store.save(_versioned("t-3", pb.TASK_STATE_COMPLETED, "c"))
        rows = {s.task_id: s.state for s in await store.summaries(ALICE)}
        assert rows == {"t-2": pb.TASK_STATE_WORKING, "t-3": pb.TASK_STATE_COMPLETED}
        await store.save(_versioned("t-2", pb.TASK_STATE_FAILED, "f"))  # asked later: wins
        on_disk, _, _ = decode_record(task_file(tmp_path, "t-2").read_bytes(), "t-2")
        assert on_disk.status.state == pb.TASK_STATE_FAILED
        rows = {s.task_id: s.state for s in await store.summaries(ALICE)}
        assert rows == {"t-2": pb.TASK_STATE_FAILED, "t-3": pb.TASK_STATE_COMPLETED}
    finally:
        await store.aclose()


async def test_an_fsync_save_asked_while_the_store_closes_lands_in_order(
    tmp_path: Path,
) -> None:
    """A save asked while ``aclose`` waits for the fsync writer goes to that writer,
    after the saves asked before it (a later save of a task wins), and the close
    returns once it has landed with its index row; a save asked after the close
    fails, writing nothing."""
    store = WorkspaceTaskStore(tmp_path, fsync=True)
    gate = threading.Event()
    try:
        await store.save(_versioned("t-1", pb.TASK_STATE_SUBMITTED, "s"))
        assert store._writer is not None
        store._writer.submit(gate.wait, 60)  # the writer thread is busy until the gate opens
        first = asyncio.create_task(store.save(_versioned("t-1", pb.TASK_STATE_WORKING, "w")))
        await asyncio.sleep(0)  # queued behind the gate
        closing = asyncio.create_task(store.aclose())
        await asyncio.sleep(0)  # the close waits for the writer
        later = asyncio.create_task(store.save(_versioned("t-1", pb.TASK_STATE_COMPLETED, "c")))
        # A chance for the later save to overtake (it did, on a writer of its own):
        # not a timed assertion, the outcome below is the same however long this is.
        await asyncio.wait({later}, timeout=0.5)
    finally:
        gate.set()
    async with asyncio.timeout(30):
        await asyncio.gather(first, later, closing)
    on_disk, _, _ = decode_record(task_file(tmp_path, "t-1").read_bytes(), "t-1")
    assert on_disk.status.state == pb.TASK_STATE_COMPLETED  # the save asked last won
    st = task_file(tmp_path, "t-1").stat()
    with sqlite3.connect(WorkspaceLayout(tmp_path).task_index) as db:
        rows = db.execute("SELECT task_id, state, mtime, size, ino FROM tasks").fetchall()
    assert rows == [("t-1", pb.TASK_STATE_COMPLETED, st.st_mtime_ns, st.st_size, st.st_ino)]
    with pytest.raises(RuntimeError, match="closed"):
        await store.save(_versioned("t-1", pb.TASK_STATE_FAILED, "f"))
    on_disk, _, _ = decode_record(task_file(tmp_path, "t-1").read_bytes(), "t-1")
    assert on_disk.status.state == pb.TASK_STATE_COMPLETED


async def test_workspace_stores_route_each_caller_to_its_workspace(tmp_path: Path) -> None:
    one, two, default = tmp_path / "one", tmp_path / "two", tmp_path / "default"
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStores(default))
    carol = Caller(name="carol", workspace=str(one))
    dave = Caller(name="carol", workspace=str(two))  # same name, other workspace
    try:
        in_one = await send(engine, "hi", carol)
        in_two = await send(engine, "hi", dave)
        anonymous = await send(engine, "hi", ANONYMOUS)
        assert task_file(one, in_one.id).exists()
        assert task_file(two, in_two.id).exists()
        assert task_file(default, anonymous.id).exists()
        with pytest.raises(errors.TaskNotFoundError):
            await engine.get_task(pb.GetTaskRequest(id=in_one.id), ctx(dave))
    finally:
        await engine.aclose()


# --- lazy restart recovery --------------------------------------------------------------


async def test_restart_recovery_is_lazy_and_spares_input_required(tmp_path: Path) -> None:
    before = TaskEngine(FauxAgent(), WorkspaceTaskStore(tmp_path))
    after = TaskEngine(FauxAgent(), WorkspaceTaskStore(tmp_path))
    try:
        held = await send(before, "hold:60", return_immediately=True)
        listed_held = await send(before, "hold:60", return_immediately=True)
        asked = await send(before, "ask:Which city?")
        path = task_file(tmp_path, held.id)
        on_disk = json.loads(path.read_bytes())
        assert on_disk["task"]["status"]["state"] in {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
        asked_bytes = task_file(tmp_path, asked.id).read_bytes()

        # A new store and engine over the same folder: the first engine's runs are lost.
        recovered = await after.get_task(pb.GetTaskRequest(id=held.id), ctx())
        assert state_name(recovered) == "FAILED"
        assert status_text(recovered) == SERVER_RESTARTED
        assert json.loads(path.read_bytes())["task"]["status"]["state"] == "TASK_STATE_FAILED"
        listed = await after.list_tasks(pb.ListTasksRequest(), ctx())
        states = {t.id: state_name(t) for t in listed.tasks}
        assert states == {held.id: "FAILED", listed_held.id: "FAILED", asked.id: "INPUT_REQUIRED"}
        waiting = await after.get_task(pb.GetTaskRequest(id=asked.id), ctx())
        assert state_name(waiting) == "INPUT_REQUIRED"
        assert task_file(tmp_path, asked.id).read_bytes() == asked_bytes  # untouched
        answered = await send(after, "Paris", task_id=asked.id)
        assert state_name(answered) == "COMPLETED"
        with pytest.raises(errors.TaskNotCancelableError):
            await after.cancel_task(pb.CancelTaskRequest(id=listed_held.id), ctx())
    finally:
        await after.aclose()
        await before.aclose()


@pytest.mark.parametrize("call", ["CancelTask", "SubscribeToTask", "SendMessage", "push config"])
async def test_a_call_that_locks_a_task_with_a_lost_run_recovers_it(
    tmp_path: Path, call: str
) -> None:
    """After a restart, a task stored working has no run: the first call to lock it
    (to cancel it, follow it, continue it, change its push configs) finds it failed,
    as GetTask would (these held the task's lock and waited for it again: forever,
    and every later call on the task with them)."""
    store = WorkspaceTaskStore(tmp_path)
    lost = _versioned("t-lost", pb.TASK_STATE_WORKING, "half")  # a run of a dead process
    await store.save(lost)
    engine = TaskEngine(FauxAgent(), store, push_enabled=True)
    try:
        async with asyncio.timeout(10):  # a bound on a hang, not a timing
            if call == "CancelTask":
                with pytest.raises(errors.TaskNotCancelableError):
                    await engine.cancel_task(pb.CancelTaskRequest(id="t-lost"), ctx())
            elif call == "SubscribeToTask":
                with pytest.raises(errors.UnsupportedOperationError):
                    await collect(
                        engine.subscribe_to_task(pb.SubscribeToTaskRequest(id="t-lost"), ctx())
                    )
            elif call == "SendMessage":
                with pytest.raises(errors.UnsupportedOperationError):
                    await send(engine, "go on", task_id="t-lost")
            else:
                config = pb.TaskPushNotificationConfig(
                    task_id="t-lost", url="https://hooks.example/a2a"
                )
                await engine.create_task_push_notification_config(config, ctx())
            recovered = await engine.get_task(pb.GetTaskRequest(id="t-lost"), ctx())
        assert state_name(recovered) == "FAILED"
        assert status_text(recovered) == SERVER_RESTARTED
    finally:
        await engine.aclose()


async def test_store_round_trips_records(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path)
    task = pb.Task(id="t-1", context_id="c-1")
    task.status.state = pb.TASK_STATE_WORKING
    task.history.add(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(raw=b"\x00\xff")])
    task.metadata.update({"k": [1, "two", None]})
    config = pb.TaskPushNotificationConfig(
        id="p", task_id="t-1", url="https://x.example", token="t"
    )
    await store.save(TaskRecord(task, ALICE, [config]))
    fresh = WorkspaceTaskStore(tmp_path)  # no cache: parsed from the file
    loaded = await fresh.load(ALICE, "t-1")
    assert loaded is not None
    assert loaded.task == task and loaded.push_configs == [config] and loaded.owner == ALICE
    assert await fresh.load(BOB, "t-1") is None
    assert [s.task_id for s in await fresh.summaries(ALICE)] == ["t-1"]
    assert await fresh.summaries(BOB) == []
    raw = orjson.loads(task_file(tmp_path, "t-1").read_bytes())
    assert raw["task"]["history"][0]["parts"][0]["raw"] == "AP8="
    os.chmod(task_file(tmp_path, "t-1"), 0o000)
    try:
        unreadable = WorkspaceTaskStore(tmp_path)
        if os.geteuid() != 0:  # root reads anyway
            assert await unreadable.load(ALICE, "t-1") is None
    finally:
        os.chmod(task_file(tmp_path, "t-1"), 0o600)


async def test_stored_json_is_a_settled_task_file_the_index_vouches_for(tmp_path: Path) -> None:
    """``stored_json`` (an answer for a binding that prints JSON), from a fresh store:
    the task's JSON as its file holds it when the record cache holds the file, or, read
    once (a retry's), when the index's row vouches for the file (the caller's, settled,
    the stamp it was indexed at); None for another owner, an active task, no row, a
    file rewritten since it was indexed, a file not cached unless read once."""
    store = WorkspaceTaskStore(tmp_path)
    await store.save(_record("done", pb.TASK_STATE_COMPLETED))
    await store.save(_record("busy", pb.TASK_STATE_WORKING))
    await store.aclose()
    fresh = WorkspaceTaskStore(tmp_path)
    try:
        await fresh.index.opened()
        path = task_file(tmp_path, "done")
        done = orjson.dumps(orjson.loads(path.read_bytes())["task"])
        assert fresh.stored_json(ALICE, "done", True) == done
        assert fresh.stored_json(ALICE, "done", False) is None  # read once: not cached
        assert fresh.stored_json(BOB, "done", True) is None
        assert fresh.stored_json(ALICE, "busy", True) is None
        assert fresh.stored_json(ALICE, "absent", True) is None
        data, indexed = path.read_bytes(), path.stat()
        path.unlink()
        path.write_bytes(data)  # the same bytes, not the file indexed: a later mtime
        os.utime(path, ns=(indexed.st_atime_ns, indexed.st_mtime_ns + 10**9))
        assert fresh.stored_json(ALICE, "done", True) is None
        assert await fresh.load(ALICE, "done") is not None  # the record cache holds it now
        assert fresh.stored_json(ALICE, "done", False) == done
        assert fresh.stored_json(BOB, "done", False) is None
    finally:
        await fresh.aclose()


async def test_a_retry_lookup_s_task_row_serves_only_its_own_task(tmp_path: Path) -> None:
    """The lookup of a retry key reads its task's row with it, for the ``stored_json``
    that follows (no second query): that row answers for that task only; another
    task's file is vouched for by its own row."""
    store = WorkspaceTaskStore(tmp_path)
    for task_id in ("one", "two"):
        await store.save(_record(task_id, pb.TASK_STATE_COMPLETED))
        store.remember_message(ALICE, f"m-{task_id}", "fp", task_id)
    await store.aclose()
    fresh = WorkspaceTaskStore(tmp_path)
    try:
        await fresh.index.opened()
        lines = {t: task_line(task_file(tmp_path, t).read_bytes()) for t in ("one", "two")}
        assert None not in lines.values() and lines["one"] != lines["two"]
        assert await fresh.lookup_message(ALICE, "m-one", "fp") == "one"
        assert fresh.stored_json(ALICE, "two", True) == lines["two"]
        assert await fresh.lookup_message(ALICE, "m-two", "fp") == "two"
        assert fresh.stored_json(ALICE, "two", True) == lines["two"]
        assert await fresh.lookup_message(ALICE, "m-one", "fp") == "one"  # (now known)
        assert fresh.stored_json(BOB, "one", True) is None  # the row is Alice's
    finally:
        await fresh.aclose()


def test_a_task_line_is_the_task_as_the_encoder_wrote_it() -> None:
    """``task_line``: the line ``encode_record`` writes the task on (the comma after it
    cut, whether keys follow or not); a task spread over lines gives its first line
    (which the index does not vouch for); None where there is no such line."""
    record = _record("done", pb.TASK_STATE_COMPLETED)
    printed = orjson.dumps(proto_dict.to_dict(record.task))
    assert task_line(encode_record(record)) == printed
    last = {"version": 1, "task": orjson.Fragment(printed)}
    assert task_line(orjson.dumps(last, option=orjson.OPT_INDENT_2)) == printed
    spread = {"version": 1, "task": proto_dict.to_dict(record.task), "pushConfigs": []}
    assert task_line(orjson.dumps(spread, option=orjson.OPT_INDENT_2)) == b"{"
    assert task_line(b'{"version": 1, "task": ' + printed + b"}") is None  # not its line
    assert task_line(b'{\n  "task": ' + printed) is None  # cut short: no line's end


# --- when files are written -------------------------------------------------------------


class CountingStore(WorkspaceTaskStore):
    """The real workspace store, counting its writes per task."""

    def __init__(self, workspace: Path) -> None:
        super().__init__(workspace)
        self.writes: dict[str, list[str]] = {}

    async def save(self, record: TaskRecord) -> None:
        states = self.writes.setdefault(record.task.id, [])
        states.append(state_name(record.task))
        await super().save(record)


async def test_a_run_that_never_suspends_is_written_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run that ends within the flush delay is written once, at its end. 21 runs
    # at once can outlast 50 ms on a loaded machine (then a lazy WORKING write is
    # right): the delay is made long enough that only a wrong write can come first.
    monkeypatch.setattr(records, "FLUSH_DELAY_S", 5.0)
    store = CountingStore(tmp_path)
    engine = TaskEngine(FauxAgent(), store)
    try:
        tasks = await asyncio.gather(*(send(engine, f"hi {i}") for i in range(20)))
        events = await collect(engine.send_streaming_message(request("chunks:50"), ctx()))
        ids = [t.id for t in tasks] + [events[0].task.id]
        # The flusher writes lazily: wait (bounded) until every task was written, then
        # a little longer, so a second write would have come by then too.
        async with asyncio.timeout(10):
            while not all(store.writes.get(i) for i in ids):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert {i: store.writes[i] for i in ids} == {i: ["COMPLETED"] for i in ids}
    finally:
        await engine.aclose()


async def test_a_task_is_on_disk_before_its_id_leaves_the_engine(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    engine = TaskEngine(FauxAgent(), store)
    try:
        held = await send(engine, "hold:30", return_immediately=True)
        assert task_file(tmp_path, held.id).exists()
        stream = engine.send_streaming_message(request("hold:30"), ctx())
        first = await stream.__anext__()
        assert task_file(tmp_path, first.task.id).exists()
        # The WORKING state follows lazily, without waiting for the run to end.
        async with asyncio.timeout(5):
            while store.writes[held.id][-1] != "WORKING":  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await engine.aclose()
    assert store.writes[held.id][-1] == "FAILED"  # shutdown: stored in a final state


@pytest.mark.parametrize("unnamed", [True, False])
async def test_both_write_paths_replace_files_and_leave_no_temp_files(
    tmp_path: Path, unnamed: bool
) -> None:
    store = WorkspaceTaskStore(tmp_path)
    store._unnamed_files = unnamed  # O_TMPFILE + linkat, or temp file + rename
    engine = TaskEngine(FauxAgent(), store)
    try:
        asked = await send(engine, "ask:Q?")  # written, then replaced twice
        done = await send(engine, "A", task_id=asked.id)
        folder = WorkspaceLayout(tmp_path).tasks
        assert sorted(p.name for p in folder.iterdir()) == [f"{asked.id}.json"]
        decoded, _, _ = decode_record(task_file(tmp_path, asked.id).read_bytes(), asked.id)
        assert decoded == done
        shutil.rmtree(folder)  # removed under the store: the next write recreates it
        again = await send(engine, "hi")
        assert task_file(tmp_path, again.id).exists()
    finally:
        await engine.aclose()


async def test_a_relative_workspace_keeps_the_unnamed_file_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The link that publishes an unnamed file resolves its target from "/": with the
    # folder's path relative, it failed, and the store fell back to renames for good.
    monkeypatch.chdir(tmp_path)
    store = WorkspaceTaskStore(Path("ws"))
    big = _versioned("t-big", pb.TASK_STATE_WORKING, "x" * 10_000)  # never created in place
    try:
        await store.save(big)
        await store.save(_versioned("t-big", pb.TASK_STATE_COMPLETED, "y" * 10_000))
        assert store._unnamed_files  # both written as unnamed files, linked in
        loaded = await store.load(ALICE, "t-big")
        assert loaded is not None and loaded.task.artifacts[0].parts[0].text == "y" * 10_000
        assert sorted(p.name for p in (tmp_path / "ws" / ".a2a" / "tasks").iterdir()) == [
            "t-big.json"
        ]
    finally:
        await store.aclose()


async def test_a_fifo_task_file_reads_as_not_found_without_hanging(tmp_path: Path) -> None:
    store = WorkspaceTaskStore(tmp_path)
    path = task_file(tmp_path, "t-fifo")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    # A blocking open of a FIFO never returns (no writer): this would hang.
    assert await store.load(ALICE, "t-fifo") is None
    assert await store.summaries(ALICE) == []


# --- the index is rebuilt from the files in a worker thread -------------------------------------


def _record(task_id: str, state: int) -> TaskRecord:
    task = pb.Task(id=task_id, context_id="ctx")
    task.status.state = state  # type: ignore[assignment]
    task.status.timestamp.GetCurrentTime()
    return TaskRecord(task, ALICE)


async def _folder_of(tmp_path: Path, count: int, state: int) -> list[str]:
    """A folder of task files and no index: the next store rebuilds it from the files."""
    store = WorkspaceTaskStore(tmp_path)
    ids = [f"task-{n:05d}" for n in range(count)]
    for task_id in ids:
        await store.save(_record(task_id, state))
    await store.aclose()
    WorkspaceLayout(tmp_path).task_index.unlink()
    return ids


async def test_listing_a_large_folder_leaves_the_event_loop_free(tmp_path: Path) -> None:
    ids = await _folder_of(tmp_path, 1500, pb.TASK_STATE_COMPLETED)
    store = WorkspaceTaskStore(tmp_path)  # a new process: every file must be parsed
    threads_before = threading.active_count()
    listing = asyncio.create_task(store.summaries(ALICE))
    ticks_while_a_thread_reads = 0

    async def ticker() -> None:
        nonlocal ticks_while_a_thread_reads
        while not listing.done():
            if threading.active_count() > threads_before:
                ticks_while_a_thread_reads += 1
            # Not sleep(0): a loop spinning on the GIL makes each of the reader's
            # GIL hand-backs wait a switch interval (5 ms), and 1,500 files then
            # took 10-30 s; a short sleep leaves the GIL free as a served loop does.
            await asyncio.sleep(0.001)

    async with asyncio.timeout(30):
        found, _ = await asyncio.gather(listing, ticker())
    assert ticks_while_a_thread_reads > 0  # the loop ran other work during the scan
    assert sorted(s.task_id for s in found) == ids
    assert await store.summaries(BOB) == []


async def test_closing_the_store_stops_a_rebuild_and_the_next_store_finishes_it(
    tmp_path: Path,
) -> None:
    await _folder_of(tmp_path, 1500, pb.TASK_STATE_COMPLETED)
    store = WorkspaceTaskStore(tmp_path)
    await store.listing(ALICE, TaskFilter(), Window(None, 1))  # starts the rebuild
    assert store.index.reconciling
    await store.aclose()  # stops it (its thread ends after the current batch)
    again = WorkspaceTaskStore(tmp_path)
    try:
        await again.index.opened()
        assert again.index.rebuilding  # not complete: rebuilt on
        assert len(await again.summaries(ALICE)) == 1500  # a small folder: waits for it
    finally:
        await again.aclose()


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"owner": "alice"},
        {"owner": {"workspace": "/ws/one"}},
        {"owner": {"name": "", "workspace": "/ws/one"}},
        {"owner": {"name": "alice", "workspace": 7}},
    ],
)
def test_an_owner_without_a_name_or_with_a_bad_workspace_is_refused(
    document: dict[str, object],
) -> None:
    # The one owner parser of record files (task files, proxy ownership records).
    with pytest.raises(ValueError, match="owner"):
        owner_from_document(document)


def test_an_owner_is_read_with_its_workspace_defaulting_to_empty() -> None:
    assert owner_from_document({"owner": {"name": "alice", "workspace": "/ws/one"}}) == ALICE
    assert owner_from_document({"owner": {"name": "anon"}}) == Caller(name="anon")


# --- reading a page ahead ---------------------------------------------------------------


class ParseCountingStore(WorkspaceTaskStore):
    """The real workspace store, recording each task file it parses (any thread)."""

    def __init__(self, workspace: Path) -> None:
        super().__init__(workspace)
        self.parsed: list[str] = []
        self.opened: list[str] = []

    def _parse_file(self, task_id: str, path: str, budget: object = None) -> object:  # type: ignore[override]
        self.opened.append(task_id)
        result = super()._parse_file(task_id, path, budget)  # type: ignore[arg-type]
        if result is not None:
            self.parsed.append(task_id)  # list.append is atomic
        return result


async def test_reading_ahead_stops_at_the_byte_budget_and_loads_still_read_the_rest(
    tmp_path: Path,
) -> None:
    writer = WorkspaceTaskStore(tmp_path)
    ids = [f"t-{n:02}" for n in range(20)]
    for task_id in ids:
        task = pb.Task(id=task_id, context_id="c")
        task.status.state = pb.TASK_STATE_COMPLETED
        task.history.add(message_id=task_id, role=pb.ROLE_USER, parts=[pb.Part(text="x" * 5000)])
        await writer.save(TaskRecord(task, ALICE))
    await writer.aclose()
    size = task_file(tmp_path, "t-00").stat().st_size
    assert all(task_file(tmp_path, t).stat().st_size == size for t in ids)

    store = ParseCountingStore(tmp_path)
    try:
        await store.prefetch(ids, max_bytes=2 * size + size // 2)
        assert len(store.parsed) == 2  # two files fit; the third would not
        # Once one did not fit, no thread opens another (those under way finish).
        assert len(store.opened) <= 3 + READ_THREADS - 1 < len(ids)
        for task_id in ids:
            loaded = await store.load(ALICE, task_id)
            assert loaded is not None and loaded.task.id == task_id
        assert sorted(store.parsed) == ids  # the rest read on demand, none twice
    finally:
        await store.aclose()

    store = ParseCountingStore(tmp_path)
    try:
        await store.prefetch(ids, max_bytes=1)  # the first file is always admitted
        assert len(store.parsed) == 1
        await store.prefetch(ids, max_bytes=100 * size)
        assert sorted(store.parsed) == ids  # all read, the one already cached not again
        await store.prefetch(ids, max_bytes=100 * size)
        assert len(store.parsed) == len(ids)
    finally:
        await store.aclose()


async def test_a_file_read_ahead_is_trusted_for_one_load_then_read_fresh(tmp_path: Path) -> None:
    writer = WorkspaceTaskStore(tmp_path)
    for task_id in ("t-1", "t-2"):
        task = pb.Task(id=task_id, context_id="c")
        task.status.state = pb.TASK_STATE_COMPLETED
        await writer.save(TaskRecord(task, ALICE))
    await writer.aclose()
    store = WorkspaceTaskStore(tmp_path)
    try:
        await store.prefetch(["t-1", "t-2"], max_bytes=1 << 20)
        first = await store.load(ALICE, "t-1")  # the page's own load, a moment later
        assert first is not None and first.task.status.state == pb.TASK_STATE_COMPLETED
        path = task_file(tmp_path, "t-1")
        path.write_bytes(path.read_bytes().replace(b"TASK_STATE_COMPLETED", b"TASK_STATE_FAILED"))
        again = await store.load(ALICE, "t-1")  # any later load checks the file again
        assert again is not None and again.task.status.state == pb.TASK_STATE_FAILED
    finally:
        await store.aclose()


class HeldReadStore(WorkspaceTaskStore):
    """The real workspace store whose reader thread, once it has read ``held``'s file,
    says so and waits to be let go: a save or a removal can then come in between."""

    def __init__(self, workspace: Path, held: str) -> None:
        super().__init__(workspace)
        self.held = held
        self.read = threading.Event()
        self.release = threading.Event()

    def _parse_file(self, task_id: str, path: str, budget: object = None) -> object:  # type: ignore[override]
        result = super()._parse_file(task_id, path, budget)  # type: ignore[arg-type]
        if task_id == self.held:
            self.read.set()
            assert self.release.wait(30)
        return result


async def _read_ahead_with(store: HeldReadStore, ids: list[str], change: Any) -> None:
    """Read ``ids`` ahead while ``change`` (a coroutine function) runs between the reader
    thread's read of the held file and the end of the read-ahead."""
    reading = asyncio.create_task(store.prefetch(ids, max_bytes=1 << 20))
    try:
        assert await asyncio.to_thread(store.read.wait, 30)
        await change()
    finally:
        store.release.set()
        await reading


@pytest.mark.parametrize("fsync", [False, True])
async def test_a_save_during_a_read_ahead_is_what_the_next_load_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    """A task saved while a page's read-ahead holds its older file is loaded as saved
    (the read-ahead's copy is not trusted without a stat), however soon the load comes."""
    monkeypatch.setattr(file_store.reads, "READ_AHEAD_FRESH_S", 3600.0)
    writer = WorkspaceTaskStore(tmp_path)
    for task_id in ("t-1", "t-2"):
        await writer.save(_versioned(task_id, pb.TASK_STATE_WORKING, "w"))
    await writer.aclose()
    store = HeldReadStore(tmp_path, "t-1")
    store.fsync = fsync
    try:

        async def save_completed() -> None:
            await store.save(_versioned("t-1", pb.TASK_STATE_COMPLETED, "done"))

        await _read_ahead_with(store, ["t-1", "t-2"], save_completed)
        loaded = await store.load(ALICE, "t-1")
        assert loaded is not None and loaded.task.status.state == pb.TASK_STATE_COMPLETED
    finally:
        await store.aclose()


async def test_a_task_removed_during_a_read_ahead_is_not_found_by_the_next_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_store.reads, "READ_AHEAD_FRESH_S", 3600.0)
    writer = WorkspaceTaskStore(tmp_path)
    await writer.save(_versioned("t-1", pb.TASK_STATE_COMPLETED, "old"))
    await writer.save(_versioned("t-2", pb.TASK_STATE_COMPLETED, "old"))
    await writer.aclose()
    store = HeldReadStore(tmp_path, "t-1")
    try:

        async def expire_all() -> None:
            assert await store.expire(1 << 62, 10) == 2

        await _read_ahead_with(store, ["t-1", "t-2"], expire_all)
        assert await store.load(ALICE, "t-1") is None
    finally:
        await store.aclose()
