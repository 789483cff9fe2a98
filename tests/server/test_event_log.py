"""The per-task event logs of the memory and workspace stores: numbering, reads of a
range (events not written yet included), the byte bounds, and what stays in memory."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from a2a_gateway.server.event_log import (
    CRC,
    EVENT_HEAD,
    FRAME_HEAD,
    SEGMENT_SUFFIX,
    EventLog,
    FileEventLog,
    MemoryEventLog,
    encode_frame,
    read_segments,
)
from a2a_gateway.server.file_store.workspaces import WorkspaceTaskStores
from lf.a2a.v1 import a2a_pb2 as pb


def chunk(n: int, size: int = 10) -> pb.StreamResponse:
    event = pb.StreamResponse()
    event.artifact_update.task_id = "t"
    event.artifact_update.artifact.parts.add(text=f"{n:0{size}d}")
    return event


def texts(events: list[pb.StreamResponse]) -> list[int]:
    return [int(e.artifact_update.artifact.parts[0].text) for e in events]


async def test_memory_log_numbers_reads_and_keeps_its_newest_within_its_bound() -> None:
    log = MemoryEventLog(task_bytes=400, total_bytes=10_000)
    assert log.append("t", chunk(0)) is None  # not streamed: no log
    assert log.start("t") == 0
    seqs = [log.append("t", chunk(n)) for n in range(1, 41)]
    assert seqs == list(range(1, 41))
    first, last = await log.bounds("t") or (0, 0)
    assert last == 40 and 1 < first <= 40  # the oldest dropped past 400 bytes
    assert texts(await log.read("t", first - 1, last)) == list(range(first, 41))
    assert texts(await log.read("t", 37, 39)) == [38, 39]
    assert log.bytes <= 400


async def test_memory_logs_drop_the_oldest_tasks_past_the_total() -> None:
    log = MemoryEventLog(task_bytes=10_000, total_bytes=2_000)
    for task in ("a", "b", "c"):
        log.start(task)
        for n in range(25):
            log.append(task, chunk(n))
    assert await log.bounds("a") is None and await log.bounds("c") == (1, 25)
    assert log.bytes <= 2_000


def log_folder(tmp_path: Path) -> str:
    return str(tmp_path / "events")


def seqs_on_disk(folder: str, task_id: str) -> list[int]:
    return [seq for task, seq, _ in read_segments(folder) if task == task_id]


def bytes_in(folder: str) -> int:
    """The bytes of the segment files in ``folder``."""
    return sum(path.stat().st_size for path in Path(folder).iterdir())


def append_to(path: Path, data: bytes) -> None:
    with path.open("ab") as file:
        file.write(data)


async def test_file_log_appends_to_one_segment_and_reads_what_is_not_written_yet(
    tmp_path: Path,
) -> None:
    folder = log_folder(tmp_path)
    log = FileEventLog(folder, task_bytes=1 << 20)
    assert await log.open("t", create=False) is None
    assert log.start("t") == 0  # a task of this process: numbered from 1
    log.start("u")
    for n in range(1, 6):
        assert log.append("t", chunk(n)) == n
        assert log.append("u", chunk(n)) == n
    assert texts(await log.read("t", 2, 5)) == [3, 4, 5]  # some maybe still pending
    await log.flush()
    assert texts(await log.read("t", 2, 5)) == [3, 4, 5]  # from the segment
    await log.aclose()
    assert os.listdir(folder) == [f"{1:012d}{SEGMENT_SUFFIX}"]  # one file for both tasks
    assert seqs_on_disk(folder, "t") == seqs_on_disk(folder, "u") == [1, 2, 3, 4, 5]
    size = bytes_in(folder)
    frame = CRC.size + FRAME_HEAD.size + 1  # one frame per task (one batch), id "t"
    assert size == 2 * (frame + 5 * (EVENT_HEAD.size + chunk(1).ByteSize()))
    reopened = FileEventLog(folder)
    assert await reopened.open("t", create=False) == 5
    assert reopened.append("t", chunk(6)) == 6
    await reopened.flush()
    assert texts(await reopened.read("t", 0, 6)) == [1, 2, 3, 4, 5, 6]
    await reopened.aclose()


async def test_file_log_past_its_bound_keeps_its_newest_half_and_drops_dead_segments(
    tmp_path: Path,
) -> None:
    folder = log_folder(tmp_path)
    record = EVENT_HEAD.size + chunk(1).ByteSize()
    log = FileEventLog(folder, task_bytes=1_000, segment_bytes=600)
    log.start("t")
    for n in range(1, 101):
        log.append("t", chunk(n))
        if n % 10 == 0:
            await log.flush()  # written in batches: the bound is checked at each
    first, last = await log.bounds("t") or (0, 0)
    assert last == 100 and first > 1
    assert texts(await log.read("t", first - 1, 100)) == list(range(first, 101))
    await log.aclose()
    on_disk = seqs_on_disk(folder, "t")
    assert on_disk[-1] == 100 and on_disk == list(range(on_disk[0], 101))
    total = bytes_in(folder)
    assert total <= 1_000 + 600 + 10 * record  # trimmed frames' segments removed
    reopened = FileEventLog(folder, task_bytes=1_000, segment_bytes=600)
    assert await reopened.bounds("t") == (first, 100)
    await reopened.aclose()


async def test_file_log_drops_a_removed_tasks_frames_and_its_segments(tmp_path: Path) -> None:
    folder = log_folder(tmp_path)
    stored = {"old", "new"}
    log = FileEventLog(folder, segment_bytes=100, alive=stored.__contains__)
    for task_id in ("old", "new"):
        log.start(task_id)
        log.append(task_id, chunk(1))
        await log.flush()  # a segment each (past 100 bytes)
    names = sorted(os.listdir(folder))
    assert len(names) == 2
    log.forget("old")
    await log.aclose()
    assert sorted(os.listdir(folder)) == names[1:]  # the old task's segment is gone
    assert await FileEventLog(folder).bounds("old") is None
    # Removed while it shared a segment with a kept task: gone from the index at once,
    # and from the next start's (the task file is gone), the segment stays.
    log = FileEventLog(folder, alive=stored.__contains__)
    for task_id in ("a", "b"):
        log.start(task_id)
        log.append(task_id, chunk(1))
    await log.flush()
    log.forget("a")
    assert await log.bounds("a") is None
    await log.aclose()
    stored.add("b")
    reopened = FileEventLog(folder, alive=stored.__contains__)
    assert await reopened.bounds("a") is None and await reopened.bounds("b") == (1, 1)
    await reopened.aclose()


async def test_a_torn_frame_is_cut_off_and_numbering_goes_on(tmp_path: Path) -> None:
    folder = log_folder(tmp_path)
    log = FileEventLog(folder)
    log.start("t")
    for n in range(1, 4):
        log.append("t", chunk(n))
    await log.aclose()
    path = Path(folder, f"{1:012d}{SEGMENT_SUFFIX}")
    whole = bytes_in(folder)
    frame = encode_frame("t", 4, [chunk(4).SerializeToString()])
    append_to(path, frame[: len(frame) // 2])  # a crash in the middle of a write
    reopened = FileEventLog(folder)
    assert await reopened.open("t", create=False) == 3
    assert bytes_in(folder) == whole
    assert reopened.append("t", chunk(4)) == 4
    await reopened.flush()
    assert texts(await reopened.read("t", 1, 4)) == [2, 3, 4]
    await reopened.aclose()
    assert seqs_on_disk(folder, "t") == [1, 2, 3, 4]


async def test_a_closed_file_log_is_read_back_from_its_segment(tmp_path: Path) -> None:
    log = FileEventLog(log_folder(tmp_path))
    log.start("t")
    log.append("t", chunk(1))
    log.close("t")  # still pending: written all the same
    await log.flush()
    assert await log.bounds("t") == (1, 1)
    assert texts(await log.read("t", 0, 1)) == [1]
    await log.aclose()


async def test_an_fsynced_file_log_writes_on_its_thread_and_reads_back(tmp_path: Path) -> None:
    folder = log_folder(tmp_path)
    log = FileEventLog(folder, fsync=True, segment_bytes=100)
    log.start("t")
    for n in range(1, 4):
        log.append("t", chunk(n))
        await log.flush()  # a write each, past 100 bytes a new segment
    assert texts(await log.read("t", 0, 3)) == [1, 2, 3]
    await log.aclose()
    assert len(os.listdir(folder)) > 1
    assert seqs_on_disk(folder, "t") == [1, 2, 3]
    reopened = FileEventLog(folder, fsync=True)
    assert await reopened.bounds("t") == (1, 3)
    await reopened.aclose()


async def test_the_index_keeps_the_open_tasks_and_the_most_recently_used_closed_ones(
    tmp_path: Path,
) -> None:
    folder = log_folder(tmp_path)
    log = FileEventLog(folder, index_tasks=2, segment_bytes=100)
    for task_id in ("a", "b", "c", "d"):
        log.start(task_id)
        log.append(task_id, chunk(1))
        await log.flush()  # a segment each (past 100 bytes)
    log.start("open")
    log.append("open", chunk(1))
    for task_id in ("a", "b", "c", "d"):
        log.close(task_id)
    assert log.indexed == 3  # the open task is not counted against the bound
    assert await log.bounds("a") is None and await log.bounds("b") is None
    assert texts(await log.read("a", 0, 1)) == []
    assert await log.bounds("c") == (1, 1)  # used: now the most recent
    log.start("e")
    log.close("e")
    assert await log.bounds("d") is None
    assert texts(await log.read("c", 0, 1)) == [1]
    assert await log.open("a", create=False) is None
    await log.aclose()
    # The segments none of whose frames is indexed are gone.
    assert seqs_on_disk(folder, "a") == seqs_on_disk(folder, "b") == []
    assert seqs_on_disk(folder, "d") == []
    assert seqs_on_disk(folder, "c") == seqs_on_disk(folder, "open") == [1]


async def test_a_restarts_scan_keeps_what_the_index_bound_allows(tmp_path: Path) -> None:
    folder = log_folder(tmp_path)
    log = FileEventLog(folder, segment_bytes=100)
    for task_id in ("a", "b", "c", "d"):
        log.start(task_id)
        log.append(task_id, chunk(1))
        log.append(task_id, chunk(2))
        await log.flush()
        log.close(task_id)
    await log.aclose()
    assert len(os.listdir(folder)) == 4
    reopened = FileEventLog(folder, index_tasks=2, segment_bytes=100)
    assert await reopened.bounds("d") == (1, 2)  # the last written are kept
    assert reopened.indexed == 2
    assert await reopened.bounds("c") == (1, 2)
    assert await reopened.bounds("a") is None and await reopened.bounds("b") is None
    assert texts(await reopened.read("c", 0, 2)) == [1, 2]
    await reopened.aclose()
    assert seqs_on_disk(folder, "a") == seqs_on_disk(folder, "b") == []
    assert len(os.listdir(folder)) == 2


async def test_the_segments_stay_within_their_total_the_oldest_dropped_first(
    tmp_path: Path,
) -> None:
    folder = log_folder(tmp_path)
    record = EVENT_HEAD.size + chunk(1).ByteSize()
    frame = CRC.size + FRAME_HEAD.size + 1 + record
    log = FileEventLog(folder, segment_bytes=3 * frame, total_bytes=6 * frame)
    log.start("t")
    for n in range(1, 31):
        log.append("t", chunk(n))
        await log.flush()  # a frame each
        assert log.disk_bytes <= 6 * frame + 3 * frame
    first, last = await log.bounds("t") or (0, 0)
    assert last == 30 and 20 < first < 30
    assert texts(await log.read("t", first - 1, 30)) == list(range(first, 31))
    assert texts(await log.read("t", 1, 30)) == []  # 2 is gone: none from after 1
    await log.aclose()
    assert bytes_in(folder) == log.disk_bytes <= 9 * frame
    assert seqs_on_disk(folder, "t") == list(range(first, 31))
    reopened = FileEventLog(folder, segment_bytes=3 * frame, total_bytes=6 * frame)
    assert await reopened.bounds("t") == (first, 30)
    await reopened.aclose()


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_log_opened_anew_for_a_stored_task_numbers_above_any_earlier_log(
    tmp_path: Path, kind: str
) -> None:
    """A stored task's log opened anew (its earlier one dropped or pushed out, or never
    kept) starts above every number an earlier log could have given, so an old resume
    point is older than it; a task of this process starts at 1."""
    log: EventLog = MemoryEventLog() if kind == "memory" else FileEventLog(log_folder(tmp_path))
    before = time.time_ns() // 1000
    last = await log.open("stored", create=True)
    assert last is not None and last >= before - 1
    assert log.append("stored", chunk(1)) == last + 1
    assert await log.bounds("stored") == (last + 1, last + 1)
    assert log.start("new") == 0
    await log.aclose()


async def test_a_workspace_store_loads_its_event_log_at_its_start_within_the_bound(
    tmp_path: Path,
) -> None:
    """The index of an earlier process's segments is loaded when the store starts (the
    gateway holds it from its start, not from its first stream), no more of it than
    ``--event-log-tasks`` allows."""
    earlier = WorkspaceTaskStores(tmp_path)
    log = earlier.default.event_log
    for task_id in ("a", "b", "c"):
        earlier.default.path(task_id).parent.mkdir(parents=True, exist_ok=True)
        earlier.default.path(task_id).touch()  # a stored task (its log is kept)
        log.start(task_id)
        log.append(task_id, chunk(1))
        await log.flush()
        log.close(task_id)
    await earlier.aclose()
    store = WorkspaceTaskStores(tmp_path, event_log_tasks=2)
    assert store.default.event_log.indexed == 0
    await store.start()
    assert store.default.event_log.indexed == 2  # the last written, before any call
    assert await store.default.event_log.bounds("c") == (1, 1)
    assert await store.default.event_log.bounds("a") is None
    await store.aclose()
