"""The per-task event logs of the memory and workspace stores: numbering, reads of a
range (events not written yet included), the byte bounds, and what stays in memory."""

from __future__ import annotations

from pathlib import Path

from a2a_gateway.server.event_log import (
    LOG_SUFFIX,
    RECORD_HEAD,
    FileEventLog,
    MemoryEventLog,
    parse_records,
)
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


async def test_file_log_appends_beside_the_task_and_reads_what_is_not_written_yet(
    tmp_path: Path,
) -> None:
    log = FileEventLog(str(tmp_path), task_bytes=1 << 20)
    assert await log.open("t", create=False) is None
    assert await log.open("t", create=True) == 0
    for n in range(1, 6):
        assert log.append("t", chunk(n)) == n
    assert texts(await log.read("t", 2, 5)) == [3, 4, 5]  # some maybe still pending
    await log.aclose()
    records, whole = parse_records((tmp_path / f"t{LOG_SUFFIX}").read_bytes())
    assert [seq for seq, _ in records] == [1, 2, 3, 4, 5]
    per_event = whole / 5
    assert per_event == RECORD_HEAD.size + chunk(1).ByteSize()
    reopened = FileEventLog(str(tmp_path))
    assert await reopened.open("t", create=False) == 5
    assert reopened.append("t", chunk(6)) == 6
    await reopened.aclose()


async def test_file_log_past_its_bound_keeps_its_newest_half(tmp_path: Path) -> None:
    log = FileEventLog(str(tmp_path), task_bytes=1_000)
    await log.open("t", create=True)
    for n in range(1, 101):
        log.append("t", chunk(n))
        if n % 10 == 0:
            await log.flush()  # written in batches: the bound is checked at each
    await log.aclose()
    data = (tmp_path / f"t{LOG_SUFFIX}").read_bytes()
    records, _ = parse_records(data)
    seqs = [seq for seq, _ in records]
    assert seqs[-1] == 100 and seqs == list(range(seqs[0], 101))
    assert len(data) <= 1_000 + 10 * (RECORD_HEAD.size + chunk(1).ByteSize())
    first, last = await FileEventLog(str(tmp_path)).bounds("t") or (0, 0)
    assert (first, last) == (seqs[0], 100)


async def test_a_closed_file_log_is_forgotten_once_written(tmp_path: Path) -> None:
    log = FileEventLog(str(tmp_path))
    log.start("t")
    log.append("t", chunk(1))
    log.close("t")  # still pending: kept until written
    assert "t" in log._logs
    await log.flush()
    assert await log.bounds("t") == (1, 1)  # read back from the file
    assert "t" not in log._logs
    await log.aclose()
