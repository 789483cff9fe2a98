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
- :class:`FileEventLog` (workspace store) appends the events of every task of the
  workspace to one log, in segment files ``.a2a/events/<n>.log`` of about
  ``segment_bytes`` each: frames of one task's events written at once (a CRC-32, the
  payload's length, the first event's number, where the task's log starts once the
  frame is added, the count, the task id, then each event's length and bytes). Appends
  are batched (:data:`WRITE_DELAY_S`): a batch, all tasks together, is one ``write`` to
  the open segment, inline on the event loop without fsync (as the task files are: no
  file is created per task), on one writer thread with fsync (then ``fdatasync``'d, and
  the folder when a segment is created). A frame torn by a crash is cut off when the
  log is loaded (the store's start, else its first use).

  An index in memory (task -> its frames' places) serves reads after a number. It is
  bounded: the tasks open here (a run or a stream of them in this process) plus the
  ``index_tasks`` most recently closed ones, within ``index_bytes`` (estimated); a task
  pushed out of it loses its logged events (a resume point of it answers with the
  snapshot and ``resumeExpired``, as an expired point does). The scan that rebuilds the
  index at the store's start (:meth:`FileEventLog.load`; else at the first use) keeps
  what the same bound allows (the most recently written tasks). A task past
  ``task_bytes`` of frames keeps its newest within half of it; the segments together are
  kept within ``total_bytes`` (the oldest segment dropped first, with its frames); a
  task removed (retention) drops its frames; a segment none of whose frames is indexed
  is removed from disk.

  Logs of earlier versions (``tasks/<id>.events``, a file per task) are not read: a
  resume point of such a task answers with the snapshot and ``resumeExpired``; the file
  is removed with its task (retention).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import chain

from a2a_gateway.local.atomic_files import fsync_folder, write_all
from lf.a2a.v1 import a2a_pb2 as pb

from .events import Event, serialized

log = logging.getLogger(__name__)

#: Bytes of events kept per task (the encoded events; the file log counts its frames).
DEFAULT_TASK_LOG_BYTES = 1024 * 1024
#: Bytes of events the memory store keeps for all tasks together.
DEFAULT_MEMORY_LOG_BYTES = 64 * 1024 * 1024
#: What a kept event costs the memory log beyond its serialized bytes (a bytes object).
_BYTES_OVERHEAD = 40
#: Bytes of a segment of the file log before the next one is started.
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
#: Bytes of all the segments of a workspace's log (the oldest dropped first past it).
DEFAULT_LOG_TOTAL_BYTES = 512 * 1024 * 1024
#: Closed tasks the file log's index keeps (the most recently closed), and their bytes.
#: (~0.7 KB an entry: a restarted gateway fills the index from the segments when its store
#: starts, so this is memory every workspace holds once streamed; at 10,000, filled at the
#: first stream then, the side-by-side bench's held streams measured 33 KiB a stream in RSS
#: after the stream scenario, not 22.)
DEFAULT_INDEX_TASKS = 1_000
DEFAULT_INDEX_BYTES = 1024 * 1024
#: What an index entry costs in memory (estimated: the entry, its object and lists),
#: and each of its frames (a tuple of five numbers).
_ENTRY_BYTES = 460
_FRAME_BYTES = 200
#: A frame: a CRC-32 of the rest, then its events' bytes, the first event's number,
#: the first event of the task kept once it is added (the task's byte bound applied),
#: the number of events, the task id's length (then the task id and the events).
CRC = struct.Struct(">I")
FRAME_HEAD = struct.Struct(">IQQIH")
#: Each event of a frame: its length, then its bytes.
EVENT_HEAD = struct.Struct(">I")
SEGMENT_SUFFIX = ".log"
#: The file per task of earlier versions, beside the task file (removed with it).
LEGACY_SUFFIX = ".events"
_CREATE = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_CLOEXEC
#: How long a logged event may wait in memory before its write starts (the engine's
#: ``FLUSH_DELAY_S`` for a live task's status): a burst is written at once.
WRITE_DELAY_S = 0.05

#: A log's range: (first event kept, last event); first = last + 1 when none is kept.
Bounds = tuple[int, int]


def renewed_first() -> int:
    """The first number of a new log of a task that may have had one before (dropped
    from the memory log, pushed out of the file log's index, an earlier version's
    file): the microseconds since the epoch, above any number its earlier log gave
    (a log numbers fewer than a million events a second), so a resume point a client
    kept from it is older than the new log and answered as expired, never with the
    new log's events under its old numbers."""
    return max(time.time_ns() // 1000, 1)


class _MemoryLog:
    __slots__ = ("bytes", "events", "first")

    def __init__(self, first: int = 1) -> None:
        self.first = first
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

    def start(self, task_id: str, renewed: bool = False) -> int:
        """Open the task's log (a new one if it has none: ``renewed`` for a task that
        may have had one); its last event's number."""
        found = self._logs.get(task_id)
        if found is None:
            found = self._logs[task_id] = _MemoryLog(renewed_first() if renewed else 1)
        return found.first + len(found.events) - 1

    async def open(self, task_id: str, create: bool) -> int | None:
        found = self._logs.get(task_id)
        if found is None:
            if not create:
                return None
            # (a stored task: its log may have been dropped, numbers given out)
            found = self._logs[task_id] = _MemoryLog(renewed_first())
        return found.first + len(found.events) - 1

    def close(self, task_id: str) -> None:
        """Nothing to release: the events stay (bounded) for a stream to resume."""

    def append(self, task_id: str, event: Event) -> int | None:
        found = self._logs.get(task_id)
        if found is None:
            return None
        data = serialized(event)  # as dear as ByteSize(), and smaller to keep
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


#: Where a frame is: (segment, offset, size, first event, last event).
Frame = tuple[int, int, int, int, int]


def encode_frame(task_id: str, first: int, events: list[bytes], kept_from: int = 0) -> bytes:
    """One frame: ``first`` and the events numbered on from it, of ``task_id``, whose
    log keeps its events from ``kept_from`` on once it is added."""
    payload = _payload(events)
    return b"".join(_frame_parts(task_id.encode(), first, kept_from, len(events), payload))


def _payload(events: list[bytes]) -> bytes:
    """Each event's length, then its bytes."""
    heads = map(EVENT_HEAD.pack, map(len, events))
    return b"".join(chain.from_iterable(zip(heads, events, strict=True)))


def _frame_parts(
    name: bytes, first: int, kept_from: int, count: int, payload: bytes
) -> list[bytes]:
    """A frame in three pieces (its CRC, its head and task id, its events)."""
    head = FRAME_HEAD.pack(len(payload), first, kept_from, count, len(name)) + name
    return [CRC.pack(zlib.crc32(payload, zlib.crc32(head))), head, payload]


def parse_frame(data: bytes, at: int) -> tuple[str, int, int, int, int, int] | None:
    """The frame at ``at``: (task id, first event, kept from, events, where its events
    start, its end); None when none is whole there (the end, or a frame torn by a
    crash)."""
    start = at + CRC.size
    body = start + FRAME_HEAD.size
    if body > len(data):
        return None
    length, first, kept_from, count, name_length = FRAME_HEAD.unpack_from(data, start)
    events_at = body + name_length
    end = events_at + length
    if end > len(data) or CRC.unpack_from(data, at)[0] != zlib.crc32(data[start:end]):
        return None
    try:
        task_id = data[body:events_at].decode()
    except UnicodeDecodeError:
        return None
    return task_id, first, kept_from, count, events_at, end


def frame_events(data: bytes, first: int, count: int, at: int) -> list[tuple[int, bytes]]:
    """(number, serialized event) of the ``count`` events of a frame, from ``at``."""
    events: list[tuple[int, bytes]] = []
    head = EVENT_HEAD.size
    for seq in range(first, first + count):
        (length,) = EVENT_HEAD.unpack_from(data, at)
        events.append((seq, data[at + head : at + head + length]))
        at += head + length
    return events


def read_segments(folder: str) -> list[tuple[str, int, bytes]]:
    """(task id, number, serialized event) of every whole frame in the segments of
    ``folder``, in the order written (for tests and inspection)."""
    found: list[tuple[str, int, bytes]] = []
    for number in segment_numbers(folder):
        data = _read_file(f"{folder}/{number:012d}{SEGMENT_SUFFIX}")
        at = 0
        while (frame := parse_frame(data, at)) is not None:
            task_id, first, _, count, events_at, at = frame
            found += [
                (task_id, seq, body) for seq, body in frame_events(data, first, count, events_at)
            ]
    return found


def segment_numbers(folder: str) -> list[int]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(
        int(name[: -len(SEGMENT_SUFFIX)])
        for name in names
        if name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit()
    )


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return b""


class _TaskLog:
    __slots__ = ("bytes", "first", "frames", "inflight", "last", "open", "pending")

    def __init__(self, first: int = 1, last: int = 0) -> None:
        self.first = first  # the first event kept (last + 1 when none is)
        self.last = last
        self.bytes = 0  # the kept frames' bytes in the segments
        self.frames: list[Frame] = []  # oldest first
        self.pending: list[bytes] = []  # events not handed to a write yet (serialized)
        self.inflight: list[bytes] = []  # events being written (fsync: on the thread)
        self.open = False  # a run or a stream of it is here (not in the closed LRU)


def _entry_bytes(task_id: str, found: _TaskLog) -> int:
    """What an index entry is counted for against ``index_bytes``."""
    return _ENTRY_BYTES + len(task_id) + _FRAME_BYTES * len(found.frames)


class _Index:
    """The tasks indexed, and the closed ones among them, least recently used first,
    with their counted bytes: bounded by ``tasks`` and ``max_bytes`` (the open ones
    are not counted: they are bounded by the work under way)."""

    def __init__(self, tasks: int, max_bytes: int) -> None:
        self.max_tasks = tasks
        self.max_bytes = max_bytes
        self.tasks: dict[str, _TaskLog] = {}
        self.closed: OrderedDict[str, int] = OrderedDict()
        self.closed_bytes = 0
        self.live: dict[int, int] = {}  # segment -> frames of it indexed

    def close(self, task_id: str, found: _TaskLog) -> None:
        found.open = False
        self.resize(task_id, found)

    def reopen(self, task_id: str, found: _TaskLog) -> None:
        found.open = True
        self.closed_bytes -= self.closed.pop(task_id, 0)

    def resize(self, task_id: str, found: _TaskLog) -> None:
        """(a closed task, its frames changed or just closed) Count it again, as the
        most recently used."""
        if found.open:
            return
        size = _entry_bytes(task_id, found)
        self.closed_bytes += size - self.closed.pop(task_id, 0)
        self.closed[task_id] = size

    def touch(self, task_id: str) -> None:
        if task_id in self.closed:
            self.closed.move_to_end(task_id)

    def drop(self, task_id: str) -> _TaskLog | None:
        """Unindex the task: a segment left with no frame indexed gets 0 in ``live``."""
        found = self.tasks.pop(task_id, None)
        self.closed_bytes -= self.closed.pop(task_id, 0)
        if found is not None:
            for frame in found.frames:
                self.live[frame[0]] -= 1
        return found

    def over(self) -> list[str]:
        """Push out the least recently used closed tasks past the bound; their ids."""
        gone: list[str] = []
        while self.closed and (
            len(self.closed) > self.max_tasks or self.closed_bytes > self.max_bytes
        ):
            task_id = next(iter(self.closed))
            self.drop(task_id)
            gone.append(task_id)
        return gone


class _Scanned:
    """(the scan at the first use) What the segments on disk hold, as bounded."""

    def __init__(self, index: _Index) -> None:
        self.index = index
        self.sizes: dict[int, int] = {}  # segment -> its whole frames' bytes
        self.next_segment = 1


class FileEventLog:
    """Events in the segments ``<folder>/<n>.log`` (see the module docstring)."""

    def __init__(
        self,
        folder: str,
        *,
        task_bytes: int = DEFAULT_TASK_LOG_BYTES,
        fsync: bool = False,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        total_bytes: int = DEFAULT_LOG_TOTAL_BYTES,
        index_tasks: int = DEFAULT_INDEX_TASKS,
        index_bytes: int = DEFAULT_INDEX_BYTES,
        alive: Callable[[str], bool] | None = None,
        legacy_folder: str | None = None,
    ) -> None:
        self.folder = folder
        self.task_bytes = task_bytes
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.total_bytes = max(total_bytes, segment_bytes)
        self._alive = alive  # (on the thread) whether a task is still stored
        self._legacy_folder = legacy_folder  # where earlier versions' logs are
        self._index = _Index(index_tasks, index_bytes)
        self._tasks = self._index.tasks
        self._live = self._index.live
        self._sizes: dict[int, int] = {}  # segment on disk -> its bytes
        self._disk_bytes = 0
        self._empty: set[int] = set()  # segments none of whose frames is indexed
        self._sealed: list[int] = []  # segments written to the end since the last flush
        self._dirty: dict[str, _TaskLog] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._loading: asyncio.Future[_Scanned] | None = None
        self._ready = False
        self._segment = 0  # the segment appended to (0: none open yet)
        self._next_segment = 1
        self._fd: int | None = None
        self._size = 0  # of the segment appended to

    def segment_path(self, number: int) -> str:
        return _segment_path(self.folder, number)

    @property
    def indexed(self) -> int:
        """Tasks in the index (open and closed)."""
        return len(self._tasks)

    @property
    def disk_bytes(self) -> int:
        """Bytes of the segments on disk, as known here."""
        return self._disk_bytes

    # --- opening and numbering ----------------------------------------------------

    def start(self, task_id: str, renewed: bool = False) -> int:
        """Open the log of a task created by this process (none can be on disk), or
        (``renewed``) of a stored task whose log :meth:`open` did not find: a new one
        numbered above any it had."""
        found = self._tasks.get(task_id)
        if found is None:
            first = renewed_first() if renewed else 1
            found = self._tasks[task_id] = _TaskLog(first, first - 1)
        if not found.open:
            self._index.reopen(task_id, found)
        return found.last

    async def open(self, task_id: str, create: bool) -> int | None:
        """The task's last event's number (a new log's with ``create``), None if it
        has no log (none, or pushed out of the index)."""
        await self._loaded()
        found = self._tasks.get(task_id)
        if found is None:
            if not create:
                return None
            # (a stored task: its log may have been pushed out, numbers given out)
            first = renewed_first()
            found = self._tasks[task_id] = _TaskLog(first, first - 1)
        if not found.open:
            self._index.reopen(task_id, found)
        return found.last

    def close(self, task_id: str) -> None:
        """No stream or run of the task is left here: its index entry joins the
        most recently closed (bounded; what is pending is written all the same)."""
        found = self._tasks.get(task_id)
        if found is None or not found.open:
            return
        self._index.close(task_id, found)
        self._push_out()

    async def bounds(self, task_id: str) -> Bounds | None:
        await self._loaded()
        found = self._tasks.get(task_id)
        if found is None:
            return None
        self._index.touch(task_id)
        return (found.first, found.last)

    def append(self, task_id: str, event: Event) -> int | None:
        found = self._tasks.get(task_id)
        if found is None:
            return None
        found.last += 1
        # (serialized(), inline: a call fewer per event)
        found.pending.append(
            event.SerializeToString() if type(event) is pb.StreamResponse else event.serialized()
        )
        if task_id not in self._dirty:
            self._dirty[task_id] = found
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.get_running_loop().create_task(
                    self._flush(), name="a2a-event-log"
                )
        return found.last

    # --- the scan of what is on disk (once: at the store's start, else the first use) --

    async def load(self) -> None:
        """Scan the segments now (the store's start): the index a first stream would
        otherwise fill (bounded: ``index_tasks`` closed tasks) and the thread that
        reads it are held from the start, not grown by the first stream's request. An
        unreadable log is logged and left empty, as at a first use."""
        await self._loaded()

    def _thread(self) -> ThreadPoolExecutor:
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="a2a-event-log")
        return self._writer

    async def _loaded(self) -> None:
        if self._ready:
            return
        if self._loading is None:
            index = self._index
            scan = partial(_scan, self.folder, index.max_tasks, index.max_bytes, self._alive)
            self._loading = asyncio.get_running_loop().run_in_executor(self._thread(), scan)
        try:
            scanned = await asyncio.shield(self._loading)  # a caller cancelled: not it
        except Exception as exc:  # unreadable: what it held is not kept
            log.warning("event log %s not read: %s", self.folder, exc)
            scanned = _Scanned(_Index(0, 0))
        if self._ready:
            return
        self._ready = True
        index = scanned.index
        for task_id, size in reversed(index.closed.items()):  # written last first
            # A task started meanwhile is a new one (a task on disk is opened first).
            found = index.tasks[task_id]
            if task_id in self._tasks:
                for frame in found.frames:
                    index.live[frame[0]] -= 1
                continue
            self._tasks[task_id] = found
            self._index.closed[task_id] = size
            self._index.closed.move_to_end(task_id, last=False)
            self._index.closed_bytes += size
        for number, count in index.live.items():
            self._live[number] = self._live.get(number, 0) + count
            if self._live[number] == 0:
                self._empty.add(number)
        for number, size in scanned.sizes.items():
            self._sizes[number] = self._sizes.get(number, 0) + size
            self._disk_bytes += size
        self._next_segment = max(self._next_segment, scanned.next_segment)
        self._push_out()
        self._bound_disk()
        self._sweep()

    # --- writing ------------------------------------------------------------------

    async def _flush(self) -> None:
        """Append what is pending, a batch at a time, until none is. Each batch waits
        :data:`WRITE_DELAY_S` first, so that a burst of events of many tasks costs one
        write (inline without fsync, as the task files are; on the thread with it)."""
        loop = asyncio.get_running_loop()
        while self._dirty:
            await asyncio.sleep(WRITE_DELAY_S)
            await self._loaded()
            batch = list(self._dirty.items())
            self._dirty = {}
            parts: list[bytes] = []
            placed: list[tuple[str, _TaskLog, int, int, int, int, int]] = []
            at = 0
            limit = max(self.task_bytes // 4, 1)
            for task_id, found in batch:
                found.inflight, found.pending = found.pending, []
                seq = found.last - len(found.inflight) + 1
                payload = _payload(found.inflight)
                if len(payload) <= limit:  # the usual case: one frame
                    frames = [(seq, len(found.inflight), payload)]
                else:
                    frames = [
                        (first, len(events), _payload(events))
                        for first, events in _frames(found.inflight, seq, limit)
                    ]
                name = task_id.encode()
                head = CRC.size + FRAME_HEAD.size + len(name)
                sizes = [(head + len(payload), first) for first, _, payload in frames]
                kept = _kept_from(self.task_bytes, found, sizes)
                for (first, count, payload), kept_from in zip(frames, kept, strict=True):
                    parts += _frame_parts(name, first, kept_from, count, payload)
                    size = head + len(payload)
                    placed.append((task_id, found, at, size, first, first + count - 1, kept_from))
                    at += size
            data = b"".join(parts)
            try:
                if self.fsync:
                    number, base = await loop.run_in_executor(self._thread(), self._append, data)
                else:
                    number, base = self._append(data)
            except Exception as exc:  # a full disk: those events are not kept
                log.warning("stream events not logged: %s", exc)
                number = 0
            for task_id, found, offset, size, first, last, kept_from in placed:
                found.inflight = []
                if number == 0 or self._tasks.get(task_id) is not found:
                    continue  # not written, or the task was removed meanwhile
                found.frames.append((number, base + offset, size, first, last))
                found.bytes += size
                self._live[number] = self._live.get(number, 0) + 1
                _keep_from(found, kept_from, self._live, self._empty)
                if not found.open:
                    self._index.resize(task_id, found)
            for number in self._sealed:
                if self._live.get(number, 0) == 0:
                    self._empty.add(number)
            self._sealed = []
            self._push_out()
            self._bound_disk()
            self._sweep()

    def _append(self, data: bytes) -> tuple[int, int]:
        """(inline, or on the thread with fsync) Append ``data`` to the open segment,
        a new one past the segment bound: (segment, offset)."""
        if self._fd is None or (self._size and self._size + len(data) > self.segment_bytes):
            self._roll()
        assert self._fd is not None
        number, base = self._segment, self._size
        try:
            write_all(self._fd, data)
            if self.fsync:
                os.fdatasync(self._fd)
        except BaseException:
            self._close_segment()  # what follows goes to a new one, after no torn frame
            raise
        self._size += len(data)
        self._sizes[number] = self._size
        self._disk_bytes += len(data)
        return number, base

    def _roll(self) -> None:
        self._close_segment()
        os.makedirs(self.folder, exist_ok=True)
        while True:
            number = self._next_segment
            self._next_segment += 1
            try:
                fd = os.open(self.segment_path(number), _CREATE, 0o600)
            except FileExistsError:  # another process's (not to be written by two)
                continue
            break
        if self.fsync:
            fsync_folder(self.folder)
        self._fd, self._segment, self._size = fd, number, 0
        self._sizes[number] = 0

    def _close_segment(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._sealed.append(self._segment)

    def _push_out(self) -> None:
        """Keep the index within its bound: the least recently used closed tasks go
        (their frames are no longer indexed)."""
        if self._index.over():
            self._empty.update(n for n, count in self._live.items() if count == 0)

    def _bound_disk(self) -> None:
        """Keep the segments within ``total_bytes``: drop the oldest (not the one
        appended to), and with it the frames of it still indexed."""
        while self._disk_bytes > self.total_bytes and self._sizes:
            oldest = min(self._sizes)
            if oldest == self._segment and self._fd is not None:
                return
            for task_id, found in list(self._tasks.items()):
                frames = found.frames
                if not frames or frames[0][0] > oldest:
                    continue
                while frames and frames[0][0] <= oldest:
                    _, _, size, _, last = frames.pop(0)
                    found.bytes -= size
                    found.first = max(found.first, last + 1)
                if not found.open:
                    self._index.resize(task_id, found)
            self._forget_segment(oldest)
            self._thread().submit(_unlink_all, [self.segment_path(oldest)])

    def _forget_segment(self, number: int) -> None:
        self._disk_bytes -= self._sizes.pop(number, 0)
        self._live.pop(number, None)
        self._empty.discard(number)

    def _sweep(self) -> None:
        """Remove (on the thread) the segments no frame of which is indexed any more."""
        gone = [n for n in self._empty if n != self._segment or self._fd is None]
        paths = [self.segment_path(number) for number in gone]
        for number in gone:
            self._forget_segment(number)
        if paths:
            self._thread().submit(_unlink_all, paths)

    # --- reading ------------------------------------------------------------------

    async def read(self, task_id: str, after: int, upto: int) -> list[pb.StreamResponse]:
        """The events numbered ``after + 1`` to ``upto`` still kept: the segments',
        then those not written yet (all taken at once, so a write meanwhile is not
        missed)."""
        await self._loaded()
        found = self._tasks.get(task_id)
        if found is None:
            return []
        self._index.touch(task_id)
        unwritten = [*found.inflight, *found.pending]
        frames = [f for f in found.frames if f[4] > after and f[3] <= upto]
        records: list[tuple[int, bytes]] = []
        if frames:
            loop = asyncio.get_running_loop()
            records = await loop.run_in_executor(self._thread(), _read_frames, self.folder, frames)
        first_unwritten = found.last - len(unwritten) + 1
        records += zip(range(first_unwritten, found.last + 1), unwritten, strict=True)
        events: list[pb.StreamResponse] = []
        expected = after + 1
        for seq, body in records:
            if seq == expected and seq <= upto:
                events.append(pb.StreamResponse.FromString(body))
                expected += 1
        return events

    # --- removal and closing ------------------------------------------------------

    def forget(self, task_id: str) -> None:
        """(on the loop; retention, once the task file is gone) Its frames are no
        longer indexed: a segment left with none is removed."""
        self._dirty.pop(task_id, None)
        found = self._index.drop(task_id)
        if found is None:
            return
        self._empty.update(f[0] for f in found.frames if self._live.get(f[0]) == 0)
        self._sweep()

    def remove_file(self, task_id: str) -> None:
        """(the store's maintenance thread) Remove the task's log file of an earlier
        version (``<id>.events`` beside the task file), if any."""
        if self._legacy_folder is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self._legacy_folder}/{task_id}{LEGACY_SUFFIX}")

    async def flush(self) -> None:
        """Return once what was appended so far is written."""
        flusher = self._flusher
        if flusher is not None:
            with contextlib.suppress(Exception):
                await flusher

    async def aclose(self) -> None:
        """Let what is pending land, then close the segment and stop the thread."""
        await self.flush()
        if self._loading is not None:
            with contextlib.suppress(Exception):
                await self._loading
        self._close_segment()
        self._sealed = []
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None


def _segment_path(folder: str, number: int) -> str:
    return f"{folder}/{number:012d}{SEGMENT_SUFFIX}"


def _scan(
    folder: str, max_tasks: int, max_bytes: int, alive: Callable[[str], bool] | None
) -> _Scanned:
    """(on the thread) Index the frames of the segments, oldest first, as they were
    kept (the same byte bound per task, the same bound of the index: the tasks
    written last are kept), cut a torn frame off, drop the tasks no longer stored,
    and remove the segments left with no frame indexed."""
    index = _Index(max_tasks, max_bytes)
    scanned = _Scanned(index)
    numbers = segment_numbers(folder)
    tasks = index.tasks
    for number in numbers:
        index.live[number] = 0
        path = _segment_path(folder, number)
        data = _read_file(path)
        at = 0
        while (frame := parse_frame(data, at)) is not None:
            task_id, first, kept_from, count, _, end = frame
            found = tasks.get(task_id)
            if found is None:
                found = tasks[task_id] = _TaskLog(first, first - 1)
            if count and first > found.last:
                # As the log was once this frame was added: from ``kept_from`` on
                # (frames trimmed before may still be in a segment of others').
                found.last = first + count - 1
                found.frames.append((number, at, end - at, first, found.last))
                found.bytes += end - at
                index.live[number] += 1
                _keep_from(found, kept_from, index.live, None)
                index.resize(task_id, found)
                index.over()
            at = end
        scanned.sizes[number] = at
        if at < len(data):  # torn by a crash in a write (or damaged): cut off
            log.warning("event log %s: %d bytes cut off at %d", path, len(data) - at, at)
            with contextlib.suppress(OSError):
                os.truncate(path, at)
    if alive is not None:
        for task_id in [t for t in tasks if not alive(t)]:
            index.drop(task_id)
    for number in [n for n, count in index.live.items() if count == 0]:
        del index.live[number]
        del scanned.sizes[number]
        with contextlib.suppress(OSError):
            os.unlink(_segment_path(folder, number))
    scanned.next_segment = numbers[-1] + 1 if numbers else 1
    return scanned


def _kept_from(task_bytes: int, found: _TaskLog, sizes: list[tuple[int, int]]) -> list[int]:
    """Where the task's log starts once each of the frames of ``sizes`` (size,
    first event) is added in turn: past ``task_bytes`` it keeps its newest frames
    within half of it (one at least)."""
    old = len(found.frames)
    frames = found.frames

    def frame(index: int) -> tuple[int, int]:
        if index < old:
            return frames[index][2], frames[index][3]
        return sizes[index - old]

    total, drop, kept = found.bytes, 0, []
    for count, (size, _) in enumerate(sizes, old + 1):
        total += size
        if total > task_bytes:
            while count - drop > 1 and total > task_bytes // 2:
                total -= frame(drop)[0]
                drop += 1
        kept.append(frame(drop)[1] if drop < count else found.first)
    return kept


def _read_frames(folder: str, frames: list[Frame]) -> list[tuple[int, bytes]]:
    """(on the thread) The events of ``frames``; those of a segment removed
    meanwhile (trimmed, the task removed) are left out."""
    records: list[tuple[int, bytes]] = []
    fds: dict[int, int] = {}
    try:
        for number, offset, size, _, _ in frames:
            fd = fds.get(number)
            if fd is None:
                try:
                    fd = fds[number] = os.open(_segment_path(folder, number), _READ)
                except FileNotFoundError:
                    continue
            data = os.pread(fd, size, offset)
            frame = parse_frame(data, 0)
            if frame is not None:
                _, first, _, count, events_at, _ = frame
                records += frame_events(data, first, count, events_at)
    finally:
        for fd in fds.values():
            os.close(fd)
    return records


def _frames(events: list[bytes], first: int, limit: int) -> list[tuple[int, list[bytes]]]:
    """``events`` (numbered from ``first``) in frames of about ``limit`` bytes at most
    (one event at least), so that the byte bound trims a long burst too."""
    frames: list[tuple[int, list[bytes]]] = []
    current: list[bytes] = []
    size = 0
    for data in events:
        if current and size + len(data) > limit:
            frames.append((first, current))
            first += len(current)
            current, size = [], 0
        current.append(data)
        size += len(data) + EVENT_HEAD.size
    frames.append((first, current))
    return frames


def _keep_from(
    found: _TaskLog, kept_from: int, live: dict[int, int], empty: set[int] | None
) -> None:
    """Drop the task's frames before ``kept_from`` (a segment left with no frame
    indexed goes to ``empty``)."""
    while found.frames and found.frames[0][4] < kept_from:
        number, _, size, _, _ = found.frames.pop(0)
        found.bytes -= size
        live[number] -= 1
        if live[number] == 0 and empty is not None:
            empty.add(number)
    found.first = max(found.first, kept_from)


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


EventLog = MemoryEventLog | FileEventLog
