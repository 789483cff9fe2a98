"""The bounded per-task event log of the stores of one process (memory and workspace).

The event log numbers every event of a task (1, 2, ...) from the moment the task is
first streamed: a task nobody streams builds no events and logs nothing; once a stream
joins it (SendStreamingMessage, SubscribeToTask) its log is open and every later event
of the task, of this run and of its next ones, is logged. A stream resumes from a
number it saw (``Last-Event-ID``) by reading the log after it (:mod:`.engine.reads`).
PostgreSQL keeps its own log (``a2a_events``, :mod:`.pg_store`), shared by processes.

- :class:`MemoryEventLog` (memory store) holds the events, serialized, at most
  ``task_bytes`` (encoded) per task, dropping a task's oldest first, and ``total_bytes``
  for all tasks together, dropping the oldest tasks' logs first.
- :class:`FileEventLog` (workspace store) appends to ``<id>.events`` beside the task
  file: records of ``seq`` (8 bytes), length (4 bytes) and the serialized event. Appends
  are batched (:data:`WRITE_DELAY_S`) and written by one writer thread (fsync'd like the task
  files when the store is), so the event loop never waits on the disk; a file past
  ``task_bytes`` is rewritten with its newest half. A record torn by a crash is cut off
  when the log is opened again. Its memory is a few counters per open task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from concurrent.futures import ThreadPoolExecutor

from a2a_gateway.local.atomic_files import fsync_folder, removed_on_failure, temp_path, write_file
from lf.a2a.v1 import a2a_pb2 as pb

log = logging.getLogger(__name__)

#: Bytes of events kept per task (the encoded events; a file adds 12 bytes a record).
DEFAULT_TASK_LOG_BYTES = 1024 * 1024
#: Bytes of events the memory store keeps for all tasks together.
DEFAULT_MEMORY_LOG_BYTES = 64 * 1024 * 1024
#: What a kept event costs the memory log beyond its serialized bytes (a bytes object).
_BYTES_OVERHEAD = 40
#: A file record's head: the event's number and its length.
RECORD_HEAD = struct.Struct(">QI")
RECORD_HEAD_SIZE = RECORD_HEAD.size
_pack_head = RECORD_HEAD.pack
LOG_SUFFIX = ".events"
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
#: How long a logged event may wait in memory before its write starts (the engine's
#: ``FLUSH_DELAY_S`` for a live task's status): a burst is written at once.
WRITE_DELAY_S = 0.05

#: A log's range: (first event kept, last event); first = last + 1 when none is kept.
Bounds = tuple[int, int]


class _MemoryLog:
    __slots__ = ("bytes", "events", "first")

    def __init__(self) -> None:
        self.first = 1
        self.events: list[bytes] = []  # serialized: what they hold is what they cost
        self.bytes = 0


class MemoryEventLog:
    """Events held in memory (see the module docstring)."""

    def __init__(
        self,
        *,
        task_bytes: int = DEFAULT_TASK_LOG_BYTES,
        total_bytes: int = DEFAULT_MEMORY_LOG_BYTES,
    ) -> None:
        self.task_bytes = task_bytes
        self.total_bytes = total_bytes
        self.bytes = 0
        self._logs: dict[str, _MemoryLog] = {}  # oldest first

    def start(self, task_id: str) -> int:
        """Open the task's log (a new one if it has none); its last event's number."""
        found = self._logs.get(task_id)
        if found is None:
            found = self._logs[task_id] = _MemoryLog()
        return found.first + len(found.events) - 1

    async def open(self, task_id: str, create: bool) -> int | None:
        if task_id in self._logs or create:
            return self.start(task_id)
        return None

    def close(self, task_id: str) -> None:
        """Nothing to release: the events stay (bounded) for a stream to resume."""

    def append(self, task_id: str, event: pb.StreamResponse) -> int | None:
        found = self._logs.get(task_id)
        if found is None:
            return None
        data = event.SerializeToString()  # as dear as ByteSize(), and smaller to keep
        size = len(data) + _BYTES_OVERHEAD
        found.events.append(data)
        found.bytes += size
        self.bytes += size
        seq = found.first + len(found.events) - 1
        if found.bytes > self.task_bytes:
            self._trim(found, self.task_bytes // 2)
        if self.bytes > self.total_bytes:
            self._drop_oldest(task_id)
        return seq

    def _trim(self, found: _MemoryLog, keep: int) -> None:
        drop = 0
        while drop < len(found.events) - 1 and found.bytes > keep:
            size = len(found.events[drop]) + _BYTES_OVERHEAD
            found.bytes -= size
            self.bytes -= size
            drop += 1
        del found.events[:drop]
        found.first += drop

    def _drop_oldest(self, keep: str) -> None:
        for task_id in list(self._logs):
            if self.bytes <= self.total_bytes * 3 // 4:
                return
            if task_id != keep:
                self.bytes -= self._logs.pop(task_id).bytes

    async def bounds(self, task_id: str) -> Bounds | None:
        found = self._logs.get(task_id)
        if found is None:
            return None
        return (found.first, found.first + len(found.events) - 1)

    async def read(self, task_id: str, after: int, upto: int) -> list[pb.StreamResponse]:
        found = self._logs.get(task_id)
        if found is None:
            return []
        start = max(after + 1 - found.first, 0)
        kept = found.events[start : max(upto + 1 - found.first, start)]
        return [pb.StreamResponse.FromString(data) for data in kept]

    def forget(self, task_id: str) -> None:
        found = self._logs.pop(task_id, None)
        if found is not None:
            self.bytes -= found.bytes

    async def aclose(self) -> None:
        self._logs.clear()
        self.bytes = 0


class _FileLog:
    __slots__ = ("closed", "first", "inflight", "last", "pending", "size")

    def __init__(self, first: int, last: int, size: int) -> None:
        self.first = first
        self.last = last
        self.size = size  # bytes in the file once what is pending is written
        self.pending: list[bytes] = []  # records (head, body, ...) not handed to the writer
        self.inflight: list[bytes] = []  # records (head, body, ...) the writer is writing
        self.closed = False  # forgotten once what it holds is written


def parse_records(data: bytes) -> tuple[list[tuple[int, bytes]], int]:
    """The records of a log file, and the length of its whole records (a record torn
    by a crash, at the end, is left out)."""
    records: list[tuple[int, bytes]] = []
    at = 0
    head = RECORD_HEAD.size
    while at + head <= len(data):
        seq, length = RECORD_HEAD.unpack_from(data, at)
        end = at + head + length
        if end > len(data):
            break
        records.append((seq, data[at + head : end]))
        at = end
    return records, at


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return b""


class FileEventLog:
    """Events in ``<folder>/<id>.events`` (see the module docstring)."""

    def __init__(
        self,
        folder: str,
        *,
        task_bytes: int = DEFAULT_TASK_LOG_BYTES,
        fsync: bool = False,
    ) -> None:
        self.folder = folder
        self.task_bytes = task_bytes
        self.fsync = fsync
        self._folder_made = False
        self._logs: dict[str, _FileLog] = {}
        self._dirty: dict[str, _FileLog] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._writer: ThreadPoolExecutor | None = None

    def path(self, task_id: str) -> str:
        return f"{self.folder}/{task_id}{LOG_SUFFIX}"

    def start(self, task_id: str) -> int:
        """Open the log of a task created by this process (no file can exist yet)."""
        found = self._logs.get(task_id)
        if found is None:
            found = self._logs[task_id] = _FileLog(1, 0, 0)
        found.closed = False
        return found.last

    async def open(self, task_id: str, create: bool) -> int | None:
        """Open the task's log, reading what its file holds (its end, torn records cut
        off); a new one with ``create``. Its last event's number, None if it has none."""
        found = self._logs.get(task_id)
        if found is None:
            loop = asyncio.get_running_loop()
            bounds = await loop.run_in_executor(self._thread(), self._scan, task_id)
            found = self._logs.get(task_id)  # opened meanwhile
            if found is None:
                if bounds is None and not create:
                    return None
                first, last, size = bounds or (1, 0, 0)
                found = self._logs[task_id] = _FileLog(first, last, size)
        found.closed = False
        return found.last

    def _scan(self, task_id: str) -> tuple[int, int, int] | None:
        """(on the writer thread) The file's (first, last, size), torn tail cut off."""
        path = self.path(task_id)
        data = _read_file(path)
        if not data:
            return None
        records, whole = parse_records(data)
        if whole < len(data):
            with contextlib.suppress(OSError):
                os.truncate(path, whole)
        if not records:
            return None
        return (records[0][0], records[-1][0], whole)

    def close(self, task_id: str) -> None:
        """No stream or run of the task is left here: forget its counters (the file
        stays; :meth:`open` reads them back)."""
        found = self._logs.get(task_id)
        if found is None:
            return
        if found.pending or found.inflight:
            found.closed = True  # the flush forgets it
        else:
            del self._logs[task_id]

    def append(self, task_id: str, event: pb.StreamResponse) -> int | None:
        found = self._logs.get(task_id)
        if found is None:
            return None
        found.last += 1
        data = event.SerializeToString()
        size = len(data)
        # The record's head and body as two pieces: joined once per batch (no copy here)
        pending = found.pending
        pending.append(_pack_head(found.last, size))
        pending.append(data)
        found.size += RECORD_HEAD_SIZE + size
        if not self._dirty:
            self._dirty[task_id] = found
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.get_running_loop().create_task(
                    self._flush(), name="a2a-event-log"
                )
        else:
            self._dirty[task_id] = found
        return found.last

    def _thread(self) -> ThreadPoolExecutor:
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="a2a-event-log")
        return self._writer

    async def _flush(self) -> None:
        """Hand what is pending to the writer thread, a batch at a time, until none is.
        Each batch waits :data:`WRITE_DELAY_S` first, so that a burst of events costs one
        write per task, not one per event."""
        loop = asyncio.get_running_loop()
        while self._dirty:
            await asyncio.sleep(WRITE_DELAY_S)
            batch = list(self._dirty.items())
            self._dirty = {}
            work: list[tuple[str, bytes, bool]] = []
            for task_id, found in batch:
                found.inflight, found.pending = found.pending, []
                compact = found.size > self.task_bytes
                work.append((task_id, b"".join(found.inflight), compact))
            try:
                results = await loop.run_in_executor(self._thread(), self._write, work)
            except Exception as exc:  # a full disk: those events are not kept
                log.warning("stream events not logged: %s", exc)
                results = {}
            for task_id, found in batch:
                found.inflight = []
                if task_id in results:
                    found.first, found.size = results[task_id]
                if found.closed and not found.pending and self._logs.get(task_id) is found:
                    del self._logs[task_id]

    def _write(self, work: list[tuple[str, bytes, bool]]) -> dict[str, tuple[int, int]]:
        """(on the writer thread) Append each task's records; rewrite a file past its
        bound with its newest half. The compacted files' new (first, size)."""
        compacted: dict[str, tuple[int, int]] = {}
        if not self._folder_made:
            os.makedirs(self.folder, exist_ok=True)
            self._folder_made = True
        created = False
        for task_id, data, compact in work:
            path = self.path(task_id)
            if self.fsync:  # a new file's name is made durable too (the folder)
                created = created or not os.path.exists(path)
            write_file(path, data, _APPEND, fsync=self.fsync)
            if compact:
                compacted[task_id] = self._compact(task_id, path)
        if self.fsync and (created or compacted):
            fsync_folder(self.folder)
        return compacted

    def _compact(self, task_id: str, path: str) -> tuple[int, int]:
        records, _ = parse_records(_read_file(path))
        keep: list[bytes] = []
        size = 0
        for seq, data in reversed(records):
            record = RECORD_HEAD.pack(seq, len(data)) + data
            if keep and size + len(record) > self.task_bytes // 2:
                break
            keep.append(record)
            size += len(record)
        keep.reverse()
        tmp = temp_path(self.folder, task_id + LOG_SUFFIX)
        with removed_on_failure(tmp):
            write_file(tmp, b"".join(keep), _CREATE, fsync=self.fsync)
            os.replace(tmp, path)
        first = RECORD_HEAD.unpack_from(keep[0])[0] if keep else 1
        return (first, size)

    async def bounds(self, task_id: str) -> Bounds | None:
        found = self._logs.get(task_id)
        if found is not None:
            return (found.first, found.last)
        loop = asyncio.get_running_loop()
        scanned = await loop.run_in_executor(self._thread(), self._scan, task_id)
        return None if scanned is None else scanned[:2]

    async def read(self, task_id: str, after: int, upto: int) -> list[pb.StreamResponse]:
        """The events numbered ``after + 1`` to ``upto`` still kept: the file's, then
        those not written yet (taken first, so a write meanwhile is not missed)."""
        found = self._logs.get(task_id)
        unwritten = [*found.inflight, *found.pending] if found is not None else []
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(self._thread(), _read_file, self.path(task_id))
        records, _ = parse_records(data + b"".join(unwritten))
        events: list[pb.StreamResponse] = []
        expected = after + 1
        for seq, body in records:
            if seq == expected and seq <= upto:
                events.append(pb.StreamResponse.FromString(body))
                expected += 1
        return events

    def forget(self, task_id: str) -> None:
        """(retention; any thread may call it after the file is gone) Drop its counters."""
        self._logs.pop(task_id, None)

    def remove_file(self, task_id: str) -> None:
        """(the store's maintenance thread) Remove the task's log file."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(task_id))

    async def flush(self) -> None:
        """Return once what was appended so far is written."""
        flusher = self._flusher
        if flusher is not None:
            with contextlib.suppress(Exception):
                await flusher

    async def aclose(self) -> None:
        """Let what is pending land, then stop the writer thread."""
        await self.flush()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None


EventLog = MemoryEventLog | FileEventLog
