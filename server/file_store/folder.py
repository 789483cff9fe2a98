"""The workspace's task files as the store's roles share them (the counterpart of
``pg_store.connection``): the folder, the index over it, the record cache, the fsync
writer and the store's life."""

from __future__ import annotations

import abc
import asyncio
import logging
import os
import stat
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.protocol.context import Caller

from ..byte_lru import ByteLRU
from ..event_log import (
    DEFAULT_INDEX_TASKS,
    DEFAULT_LOG_TOTAL_BYTES,
    DEFAULT_TASK_LOG_BYTES,
    FileEventLog,
)
from ..secret_box import SecretBox
from ..task_index import Parsed, TaskIndex
from ..task_store import MessageKey, TaskStore, TaskSummary

log = logging.getLogger(__name__)

TASKS_FOLDER = RELATIVE.tasks
#: The event log's segments (``event_log.FileEventLog``).
EVENTS_FOLDER = RELATIVE.events
CACHE_ENTRIES = 4096
CACHE_BYTES = 64 * 1024 * 1024

Stamp = tuple[int, int, int]
O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)


class ReadBudget:
    """Bytes of task files a prefetch may still read, shared by its reader threads:
    the first file is always admitted, later ones only while they fit."""

    __slots__ = ("_left", "_lock", "_started", "spent")

    def __init__(self, max_bytes: int) -> None:
        self._left = max_bytes
        self._started = False
        self._lock = threading.Lock()
        self.spent = False  # a file did not fit: the page's answer stops about here

    def admit(self, size: int) -> bool:
        with self._lock:
            if self._started and (self.spent or size > self._left):
                self.spent = True
                return False
            self._started = True
            self._left -= size
            return True


def _nothing() -> None:
    """A job that only marks its place in a thread's queue."""


class Loaded:
    """A parsed task file: its owner, summary, serialized protobufs and retry keys, and
    the task's JSON when the file holds it as an answer prints it (``task_json``)."""

    __slots__ = (
        "owner",
        "push",
        "push_versions",
        "retry_keys",
        "summary",
        "task_bytes",
        "task_json",
    )

    def __init__(
        self,
        owner: Caller,
        summary: TaskSummary,
        task_bytes: bytes,
        push: tuple[bytes, ...],
        push_versions: tuple[tuple[str, str], ...] = (),
        retry_keys: tuple[MessageKey, ...] = (),
        task_json: bytes | None = None,
    ) -> None:
        self.owner = owner
        self.summary = summary
        self.task_bytes = task_bytes
        self.push = push
        self.push_versions = push_versions
        self.retry_keys = retry_keys
        self.task_json = task_json


MALFORMED = object()  # cache value for a file that failed to parse (logged once)


def file_stamp(st: os.stat_result) -> Stamp:
    # No ctime: the rename that publishes a write changes it, while mtime, size and
    # inode are those of the temp file we wrote (and fstat'ed) ourselves.
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _read_all(fd: int, size: int) -> bytes:
    """The whole file: one read when it is the size fstat said (plain ``os.read``; a
    buffered file object costs ~3 us more per task file)."""
    data = os.read(fd, size + 1)
    if len(data) <= size:
        return data
    chunks = [data]  # it grew since the fstat (an edit in place): read to the end
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


class TaskFiles(TaskStore):
    """A workspace's task files: where they are, the index over them, the cache of
    records read and the writer of their atomic writes, and the store's life (start,
    readiness, gauges, close). Its roles read them (``reads``), write them
    (``writes``), expire them (``retention``) and keep the retry keys (``retry_keys``)."""

    kind = "files"

    def __init__(
        self,
        workspace: Path,
        *,
        fsync: bool = False,
        cache_entries: int = CACHE_ENTRIES,
        cache_bytes: int = CACHE_BYTES,
        reconcile_interval_s: float = 600.0,
        event_log_bytes: int = DEFAULT_TASK_LOG_BYTES,
        event_log_tasks: int = DEFAULT_INDEX_TASKS,
        event_log_total_bytes: int = DEFAULT_LOG_TOTAL_BYTES,
    ) -> None:
        self.workspace = Path(workspace)
        self.folder = self.workspace / TASKS_FOLDER
        self.fsync = fsync
        self.box = SecretBox(self.workspace)
        # Absolute: the unnamed files' link (``writes``) resolves its target path from
        # "/", so a relative workspace would make every write fall back to a rename.
        self._dir = os.path.abspath(self.folder)
        self._folder_ready = False
        self._unnamed_files = O_TMPFILE != 0
        # (writes) Ids of tasks last written in a state that is not final (bounded).
        self._unfinished: dict[str, None] = {}
        # Recently loaded records, validated by the file's stamp before use.
        self._cache: ByteLRU[str, tuple[Stamp, Loaded | object]] = ByteLRU(
            cache_entries, cache_bytes
        )
        # Files a ListTasks page's read-ahead just read (id -> when): the page's own
        # loads take them without a second stat on the event loop (in a folder of a
        # million entries a stat is a directory lookup, ~25 us warm, a disk read cold).
        self._read_ahead: dict[str, float] = {}
        # One set per read-ahead under way: the tasks written or removed meanwhile,
        # whose file it may have read before the change (it keeps none of those).
        self._changed_during: list[set[str]] = []
        self.index = TaskIndex.shared(
            self.workspace / RELATIVE.task_index,
            self.folder,
            self._parse_summary,
            reconcile_interval_s=reconcile_interval_s,
        )
        self._started = False
        self._writer: ThreadPoolExecutor | None = None  # fsync: the writes (see save)
        self._writes_asked = 0  # fsync: saves handed to the writer so far
        self._closed = False  # fsync: the writer is gone, a save fails
        self.event_log: FileEventLog = FileEventLog(
            str(self.workspace / EVENTS_FOLDER),
            task_bytes=event_log_bytes,
            fsync=fsync,
            alive=lambda task_id: os.path.exists(f"{self._dir}/{task_id}.json"),
            total_bytes=event_log_total_bytes,
            index_tasks=event_log_tasks,
            legacy_folder=self._dir,
        )

    @abc.abstractmethod
    def _parse_summary(self, task_id: str, path: str) -> Parsed:
        """(``reads``) What the index keeps of one file."""

    def path(self, task_id: str) -> Path:
        return self.folder / f"{task_id}.json"

    def _start(self) -> TaskIndex:
        if not self._started:
            self._started = True
            self.index.start()
        return self.index

    async def start(self) -> None:
        """Load the event log's index now (bounded: ``--event-log-tasks``), so that the
        gateway holds it from its start rather than growing by it at its first stream."""
        await self.event_log.load()

    async def readiness(self) -> str | None:
        try:
            await self._start().check_readable()
        except Exception as exc:
            log.warning("readiness: the task index of %s is not usable: %r", self.workspace, exc)
            return "the task index cannot be read"
        return None

    async def count_by_state(self) -> Mapping[int, int] | None:
        return await self._start().count_by_state()

    def store_gauges(self) -> Mapping[str, int]:
        return {"index_rebuilds": self.index.rebuilds}

    def _forget(self, task_id: str) -> None:
        """The task's file was just written or removed: drop its cached record, and
        tell each read-ahead under way that what it read of the file may be stale."""
        self._cache.pop(task_id)
        self._read_ahead.pop(task_id, None)
        for changed in self._changed_during:
            changed.add(task_id)

    @staticmethod
    def _read_raw(path: str, budget: ReadBudget | None = None) -> tuple[Stamp, bytes | None] | None:
        """The file's stamp and bytes (None when it is not a regular file); None when
        it cannot be opened or read, or ``budget`` does not admit its size."""
        try:
            # O_NONBLOCK: a FIFO planted under a task's name must not hang the server.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return file_stamp(st), None
            if budget is not None and not budget.admit(st.st_size):
                return None
            return file_stamp(st), _read_all(fd, st.st_size)
        except OSError:
            return None
        finally:
            os.close(fd)

    async def aclose(self) -> None:
        """Let the writes asked for land (fsync), also those asked while it waits, then
        stop the index's background work and close it."""
        while (writer := self._writer) is not None:
            asked = self._writes_asked
            # Queued behind every write asked so far: once it has run, they have landed
            # and their index rows are in (their callbacks were scheduled first).
            await asyncio.get_running_loop().run_in_executor(writer, _nothing)
            if self._writes_asked == asked:  # none asked meanwhile (they queue here too)
                self._writer = None
                writer.shutdown(wait=False)
        self._closed = True  # in the step that saw the last write land
        await self.event_log.aclose()
        await self.index.aclose()
