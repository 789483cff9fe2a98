"""Stream resumption in the engine, on each store: a stream cut mid-run resumes from
the id of the last event it got, with every later event once, on the same engine and,
on PostgreSQL, on another replica; numbering goes on across runs and restarts."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import asyncpg
import pytest

from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.resume import RESUME_EXPIRED
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.event_log import (
    SEGMENT_SUFFIX,
    encode_frame,
    read_segments,
    segment_numbers,
)
from a2a_gateway.server.events import ChunkEvent, Event, TaskStream, event_proto
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.memory_store import MemoryTaskStore
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.task_store import TaskStore
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.postgres import Clock, fresh_database

from .engine_helpers import WAIT_S, collect, ctx, request, state_name
from .test_engine_replicas import two_engines


def append_to(path: Path, data: bytes) -> None:
    with path.open("ab") as file:
        file.write(data)


async def pushed_out(store: WorkspaceTaskStore) -> None:
    """Until the file log's index of one closed task holds the newer one only."""
    async with asyncio.timeout(WAIT_S):
        while True:
            if store.event_log.indexed == 1:
                return
            await asyncio.sleep(0.01)


def chunk_of(event: pb.StreamResponse) -> str:
    if not event.HasField("artifact_update"):
        return ""
    return event.artifact_update.artifact.parts[0].text


async def cut_after(engine: TaskEngine, text: str, upto: str) -> tuple[str, str]:
    """SendStreamingMessage ``text`` and close the stream once ``upto`` arrived: (task
    id, the id of the last event received)."""
    context = ctx()
    stream = engine.send_streaming_message(request(text), context)
    task_id = event_id = ""
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            event_id = context.event_id
            if event.HasField("task"):
                task_id = event.task.id
            if chunk_of(event) == upto:
                break
    await stream.aclose()  # type: ignore[attr-defined]  # an async generator
    assert event_id.startswith(task_id + ":"), event_id
    return task_id, event_id


async def resumed(
    engine: TaskEngine, task_id: str, event_id: str
) -> tuple[list[pb.StreamResponse], list[str]]:
    """SubscribeToTask from ``event_id``: the events and their ids."""
    context = ctx(resume_from=event_id)
    stream = engine.subscribe_to_task(pb.SubscribeToTaskRequest(id=task_id), context)
    events: list[pb.StreamResponse] = []
    ids: list[str] = []
    async with asyncio.timeout(WAIT_S * 2):
        async for event in stream:
            events.append(event)
            ids.append(context.event_id)
    return events, ids


def assert_rest(events: list[pb.StreamResponse], ids: list[str], task_id: str, after: str) -> None:
    """``events`` are exactly chunks 18-39 and the final status, numbered on from ``after``."""
    assert [chunk_of(e) for e in events if e.HasField("artifact_update")] == [
        f"chunk-{i}" for i in range(18, 40)
    ]
    assert not any(e.HasField("task") for e in events)
    finals = [e for e in events if e.HasField("status_update")]
    assert [pb.TaskState.Name(e.status_update.status.state) for e in finals] == [
        "TASK_STATE_COMPLETED"
    ]
    first = int(after.rpartition(":")[2]) + 1
    assert ids == [f"{task_id}:{n}" for n in range(first, first + len(events))]


async def until_parts(engine: TaskEngine, task_id: str, count: int) -> None:
    """Wait until the task (as ``engine`` reads it) holds ``count`` chunks (their text
    is one part: a run's streamed text is stored whole)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            task = await engine.get_task(pb.GetTaskRequest(id=task_id), ctx())
            text = "".join(p.text for a in task.artifacts for p in a.parts)
            if text.count("chunk-") >= count:
                return
            await asyncio.sleep(0.02)


async def test_a_cut_stream_resumes_on_the_same_engine(engine: TaskEngine) -> None:
    task_id, cut_at = await cut_after(engine, "chunks:40:20", "chunk-17")
    await until_parts(engine, task_id, 25)  # some go by while nobody listens
    events, ids = await resumed(engine, task_id, cut_at)
    assert_rest(events, ids, task_id, cut_at)


async def test_a_stream_cut_on_one_replica_resumes_on_the_other(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    url = await fresh_database(postgres)
    async with two_engines(url, tmp_path, Clock(), Clock()) as (a, b):
        task_id, cut_at = await cut_after(a, "chunks:40:20", "chunk-17")
        await until_parts(b, task_id, 25)
        events, ids = await resumed(b, task_id, cut_at)
        assert_rest(events, ids, task_id, cut_at)


async def test_a_resume_waits_for_events_a_stored_row_names_before_they_are_committed(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """A's rows go on while its event writer is held (a real lock on the events table):
    B's resume reads fewer events than the row names, and waits (bounded) for them
    instead of answering that they are gone."""
    url = await fresh_database(postgres)
    holder = await asyncpg.connect(url)
    try:
        async with two_engines(url, tmp_path, Clock(), Clock()) as (a, b):
            task_id, cut_at = await cut_after(a, "chunks:40:20", "chunk-17")
            held = holder.transaction()
            await held.start()
            await holder.execute("LOCK TABLE a2a_events IN EXCLUSIVE MODE")  # reads go on
            await until_parts(b, task_id, 30)  # stored, its events not yet written
            resuming = asyncio.create_task(resumed(b, task_id, cut_at))
            await asyncio.sleep(0.3)
            await held.rollback()  # the writer commits what it held
            events, ids = await resuming
            assert_rest(events, ids, task_id, cut_at)
    finally:
        await holder.close()


async def test_numbers_go_on_across_runs_of_a_task(engine: TaskEngine) -> None:
    context = ctx()
    first = await collect(engine.send_streaming_message(request("ask:name?"), context))
    task_id = first[0].task.id
    asked = context.event_id
    assert state_name(first[-1].status_update) == "INPUT_REQUIRED"  # type: ignore[arg-type]
    answer = ctx()
    second = await collect(
        engine.send_streaming_message(request("chunks:2", task_id=task_id), answer)
    )
    assert second[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    # The second run's events follow the first's: a resume from the question replays them.
    events, ids = await resumed(engine, task_id, asked)
    assert [chunk_of(e) for e in events if chunk_of(e)] == ["chunk-0", "chunk-1"]
    assert ids[-1] == answer.event_id


async def test_the_file_log_numbers_on_after_a_restart_and_cuts_a_torn_record(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(workspace))
    context = ctx()
    events = await collect(engine.send_streaming_message(request("ask:name?"), context))
    task_id, asked = events[0].task.id, context.event_id
    await engine.aclose()
    events_folder = str(WorkspaceLayout(workspace).events)
    records = [seq for task, seq, _ in read_segments(events_folder) if task == task_id]
    assert records == list(range(1, len(records) + 1))
    segment = Path(events_folder, f"{segment_numbers(events_folder)[-1]:012d}{SEGMENT_SUFFIX}")
    frame = encode_frame(task_id, len(records) + 1, [b"x" * 500])
    append_to(segment, frame[:100])  # a crash in the middle of an append
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(workspace))
    try:
        answer = ctx()
        await collect(engine.send_streaming_message(request("chunks:1", task_id=task_id), answer))
        replayed, ids = await resumed(engine, task_id, asked)
        assert [chunk_of(e) for e in replayed if chunk_of(e)] == ["chunk-0"]
        assert ids[0] == f"{task_id}:{len(records) + 1}" and ids[-1] == answer.event_id
    finally:
        await engine.aclose()


async def test_a_task_nobody_streamed_has_no_log(store: TaskStore) -> None:
    """A blocking send builds no events on the memory and file stores, and on PostgreSQL
    logs none of a run nobody could see (no stream here, not stored while it ran: no
    other replica could follow it), so its task has no log to resume from: a resume
    point of it is answered with the snapshot, flagged."""
    engine = TaskEngine(FauxAgent(), store)
    try:
        response = await engine.send_message(request("chunks:3"), ctx())
        task_id = response.task.id
        assert response.task.status.state == pb.TASK_STATE_COMPLETED
        events, _ = await resumed(engine, task_id, f"{task_id}:2")
        assert len(events) == 1 and events[0].task.metadata[RESUME_EXPIRED]
    finally:
        await engine.aclose()


async def test_a_task_pushed_out_of_the_file_logs_index_resumes_expired(tmp_path: Path) -> None:
    """The file log's index keeps the tasks streamed most recently (``event_log_tasks``
    of them once closed): an older task's resume point is answered with its snapshot,
    flagged, as an expired point is; a recent one's resumes."""
    store = WorkspaceTaskStore(tmp_path / "ws", event_log_tasks=1)
    engine = TaskEngine(FauxAgent(), store)
    try:
        older = (await collect(engine.send_streaming_message(request("chunks:4"), ctx())))[0]
        newer = (await collect(engine.send_streaming_message(request("chunks:4"), ctx())))[0]
        await pushed_out(store)  # (the older one)
        events, _ = await resumed(engine, older.task.id, f"{older.task.id}:2")
        assert len(events) == 1 and events[0].task.metadata[RESUME_EXPIRED]
        events, ids = await resumed(engine, newer.task.id, f"{newer.task.id}:2")
        assert not any(e.HasField("task") for e in events)
        assert [chunk_of(e) for e in events if chunk_of(e)] == ["chunk-1", "chunk-2", "chunk-3"]
        assert ids[0] == f"{newer.task.id}:3"
    finally:
        await engine.aclose()


async def test_a_task_streamed_again_after_its_log_was_pushed_out_numbers_above_its_old_ids(
    tmp_path: Path,
) -> None:
    """A task whose log left the index and is streamed again starts a new log: its
    numbers are above every id the old one gave, so a client's old resume point gets
    the snapshot, flagged, not the new run's events under their old numbers."""
    store = WorkspaceTaskStore(tmp_path / "ws", event_log_tasks=1)
    engine = TaskEngine(FauxAgent(), store)
    try:
        asked = await collect(engine.send_streaming_message(request("ask:Which city?"), ctx()))
        older = asked[0].task
        await collect(engine.send_streaming_message(request("chunks:4"), ctx()))
        await pushed_out(store)  # (the older one)
        again = request("chunks:6", task_id=older.id, context_id=older.context_id)
        await collect(engine.send_streaming_message(again, ctx()))
        events, _ = await resumed(engine, older.id, f"{older.id}:2")
        assert len(events) == 1 and events[0].task.metadata[RESUME_EXPIRED]
    finally:
        await engine.aclose()


@pytest.mark.parametrize("store_kind", ["file", "memory"])
async def test_a_stream_joining_a_continued_task_whose_log_was_dropped_numbers_above_its_old_ids(
    tmp_path: Path, store_kind: str
) -> None:
    """A task whose log is gone (out of the file log's index; dropped by the memory
    logs' total bound) is continued by a send with no stream, and a stream joins that
    run: the log opened then numbers above every id the old one gave (not from 1)."""
    store: TaskStore
    if store_kind == "file":
        store = WorkspaceTaskStore(tmp_path / "ws", event_log_tasks=1)
    else:
        store = MemoryTaskStore(event_logs_bytes=1)
    engine = TaskEngine(FauxAgent(), store)
    try:
        context = ctx()
        old_last = 0
        async with asyncio.timeout(WAIT_S):
            async for event in engine.send_streaming_message(request("ask:Which city?"), context):
                old_last = int(context.event_id.rsplit(":", 1)[1])
                if event.HasField("task"):
                    older = event.task
        assert old_last >= 2
        await collect(engine.send_streaming_message(request("chunks:4"), ctx()))
        if isinstance(store, WorkspaceTaskStore):
            await pushed_out(store)  # (the older one)
        again = request("hold:0.3", task_id=older.id, context_id=older.context_id)
        again.configuration.return_immediately = True
        await engine.send_message(again, ctx())
        context = ctx()
        numbers = []
        joining = engine.subscribe_to_task(pb.SubscribeToTaskRequest(id=older.id), context)
        async with asyncio.timeout(WAIT_S):
            async for _ in joining:
                numbers.append(int(context.event_id.rsplit(":", 1)[1]))
        assert len(numbers) >= 2 and numbers == sorted(numbers)
        assert numbers[0] > old_last  # a new log: microseconds since the epoch
    finally:
        await engine.aclose()


async def test_a_stream_read_by_batches_gives_the_events_its_log_keeps(engine: TaskEngine) -> None:
    """The SSE writer's way (``TaskStream.next_batch``): the text chunks come as their
    pieces (no protobuf built), and are the events the log keeps (resumed from the
    snapshot's number, the log's bytes parsed) with the same numbers."""
    stream = engine.send_streaming_message(request("chunks:6"), ctx())
    assert isinstance(stream, TaskStream)
    live: list[tuple[Event, int]] = []
    prefix = ""
    async with asyncio.timeout(WAIT_S):
        with contextlib.suppress(StopAsyncIteration):
            while True:
                events, seqs, prefix = await stream.next_batch()
                live.extend(zip(events, seqs, strict=True))
    await stream.aclose()
    snapshot, snapshot_seq = live[0]
    assert isinstance(snapshot, pb.StreamResponse) and snapshot.HasField("task")
    task_id = snapshot.task.id
    assert prefix == task_id + ":"
    chunks = [event for event, _ in live if isinstance(event, ChunkEvent)]
    assert [chunk.text for chunk in chunks] == [f"chunk-{i}" for i in range(6)]
    logged, ids = await resumed(engine, task_id, f"{task_id}:{snapshot_seq}")
    assert logged == [event_proto(event) for event, _ in live[1:]]
    assert ids == [f"{task_id}:{seq}" for _, seq in live[1:]]
    assert state_name(pb.Task(status=logged[-1].status_update.status)) == "COMPLETED"
