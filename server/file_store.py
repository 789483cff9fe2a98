"""The workspace task store: one JSON file per task, ``<workspace>/.a2a/tasks/<id>.json``.

File format (ProtoJSON for the protocol objects; edit it by hand if you like)::

    {"version": 1,
     "owner": {"name": "travel-bot", "workspace": "/srv/ws"},
     "task": {...Task...},
     "pushConfigs": [{...TaskPushNotificationConfig...}],
     "pushConfigVersions": {"<config id>": "0.3"},
     "retryKeys": [{"messageId": "...", "fingerprint": "..."}]}

``pushConfigVersions`` (only when there are any) names the configs registered over an
A2A version other than 1.0: their deliveries take that version's shape.

``retryKeys`` (only when there are any) are the messageId retry keys of the messages
that created or continued the task (``engine.retries``; their owner is the file's).
The index below is what lookups use; the file holds them too, because the file is
durable before the answer that names the task leaves while the index commits a few
milliseconds later: after a kill -9, the reconcile at the next start puts back the keys
of the files written after the index's last commit, and retry-key lookups wait for it
(:meth:`~.task_index.TaskIndex.lookup_message`), so a message answered just before the
kill and retried after the restart finds its task.

Push-config secrets (``token``, ``authentication.credentials``) are sealed with the
workspace's :class:`~.secret_box.SecretBox` on every write (``"enc:v1:..."``) and opened
on read, so records in memory hold plaintext and files never do. A plaintext value
(a hand-edited file) is read as is and sealed by the next write. A config whose secret
does not open (the key file was replaced or removed) is dropped from the record, with
a warning naming the config id and the file, never the value.

Writes are atomic: the record is written whole to an unnamed file (Linux
``O_TMPFILE``) that is then linked in as the task file, or, when it replaces a file or
the system cannot do that, to a temp file in the same folder (``.<id>.<pid>.<n>.tmp``)
renamed over the task file. A reader, or a process killed with SIGKILL at any instant,
sees the old file or the new one, never a half-written one (an unnamed file of a
killed process just vanishes). Stale temp files (another process id in their name)
are removed by the index's reconcile, which runs at start after an unclean stop.

Reads are fresh: every load ``stat``s the file; a cache of recently read records, as
serialized protobuf bytes, bounded by a count and a byte budget (``cache_entries``,
``cache_bytes``), is used only while the file's (mtime, size, inode) stamp is
unchanged, so an edit or removal on disk applies to the next request. A malformed or
unreadable file (bad JSON, bad task, id not matching its name) reads as "no such task";
it is logged once per version of the file while it is cached, with its path only.

ListTasks and the messageId retry keys use the workspace's index on disk
(``.a2a/index.sqlite3``, see ``task_index``): every write updates its row in the same
step, and the index notices files changed behind the server's back (the folder's mtime
on each ListTasks, a periodic reconcile), and is rebuilt in the background when it is
missing or unreadable.

Measurements (this host: ext4 on a virtual disk, ~1 KiB records, one writer; the disk
alternates between slow and fast phases, hence the ranges):

- atomic write without fsync: 1,100-18,900 new files/s, 1,300-10,000 replacements/s;
- with fsync (the file before the rename, the folder after a new file): 900-2,900/s;
- in the engine, inline writes vs ``asyncio.to_thread``: 2,190-2,260 vs 2,020-2,150
  blocking sends/s on one pinned core (the bench pins the server to one core, where a
  thread cannot overlap the kernel's work and only adds hand-offs), so writes are
  inline. Creating the file is most of the cost; the engine writes a task once when its
  run ends without waiting (see ``engine``), not at every state.

fsync policy: ``fsync=False`` by default. A process crash (kill -9, OOM) loses nothing
that was written: the rename is atomic and the page cache belongs to the kernel. A
power cut or kernel crash may lose the last seconds of updates, and a file whose data
had not reached the disk may read as malformed, i.e. TaskNotFound, never as a crash.
``fsync=True`` (``serve --fsync``) makes every write durable before it returns. Its
writes (the file, its fsync, the link or rename, the folder's fsync) run on one writer
thread per store, so the event loop never waits on the disk; one thread, so they land
in the order they were asked for (a later save of a task always wins), and each index
row follows its file in that order, also when the save that asked was cancelled. A
save asked while the store closes joins that queue and lands before the close
returns; one asked after it raises, writing nothing.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from google.protobuf import json_format

from a2a_gateway.local.atomic_files import fsync_folder, removed_on_failure, temp_path, write_all
from a2a_gateway.local.files import INBOX_FOLDER
from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.protocol import proto_dict
from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .byte_lru import ByteLRU
from .event_log import DEFAULT_TASK_LOG_BYTES, FileEventLog
from .ids import valid_id
from .secret_box import SecretBox, SecretBoxError
from .task_index import (
    RECONCILE_WAIT_ROWS,
    Parsed,
    TaskIndex,
    unreadable_for_now,
)
from .task_store import (
    Listing,
    MessageKey,
    TaskFilter,
    TaskRecord,
    TaskStore,
    TaskSummary,
    Window,
)

log = logging.getLogger(__name__)

TASKS_FOLDER = RELATIVE.tasks
FORMAT_VERSION = 1
CACHE_ENTRIES = 4096
CACHE_BYTES = 64 * 1024 * 1024
#: Part.metadata key naming where a received file was saved (the engine's SAVED_AS_KEY).
SAVED_AS_KEY = "a2a-gateway.savedAs"
_ENTRY_OVERHEAD = 300  # bytes a cached record costs beyond its serialized bytes

_Stamp = tuple[int, int, int]
_O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)
_root: list[int] = []


def _root_fd() -> int:
    """A directory fd held for the process's life, only to make ``os.link`` use
    ``linkat`` (the paths given with it are absolute, so it is never used to resolve)."""
    if not _root:
        _root.append(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    return _root[0]


_READERS: list[ThreadPoolExecutor] = []
READ_THREADS = 8  # files read at once by a ListTasks page (see prefetch)
#: A file read ahead for a page is taken by that page's load without another stat
#: when the load comes within this long (it does, a few ms later).
READ_AHEAD_FRESH_S = 0.5


class _ReadBudget:
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


def _reader_pool() -> ThreadPoolExecutor:
    if not _READERS:
        _READERS.append(ThreadPoolExecutor(READ_THREADS, thread_name_prefix="a2a-task-read"))
    return _READERS[0]


class _Loaded:
    """A parsed task file: its owner, summary, serialized protobufs and retry keys."""

    __slots__ = ("owner", "push", "push_versions", "retry_keys", "summary", "task_bytes")

    def __init__(
        self,
        owner: Caller,
        summary: TaskSummary,
        task_bytes: bytes,
        push: tuple[bytes, ...],
        push_versions: tuple[tuple[str, str], ...] = (),
        retry_keys: tuple[MessageKey, ...] = (),
    ) -> None:
        self.owner = owner
        self.summary = summary
        self.task_bytes = task_bytes
        self.push = push
        self.push_versions = push_versions
        self.retry_keys = retry_keys


_MALFORMED = object()  # cache value for a file that failed to parse (logged once)


def _stamp(st: os.stat_result) -> _Stamp:
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


def encode_record(record: TaskRecord, box: SecretBox | None = None) -> bytes:
    """The JSON bytes of a task file; with ``box``, push-config secrets are sealed."""
    configs = record.push_configs
    if box is not None and configs:
        configs = [box.seal_push_config(c, keep_sealed=False) for c in configs]
    document: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "owner": {"name": record.owner.name, "workspace": record.owner.workspace},
        "task": proto_dict.to_dict(record.task),
        "pushConfigs": [proto_dict.to_dict(c) for c in configs],
    }
    if record.push_versions:
        document["pushConfigVersions"] = dict(record.push_versions)
    if record.retry_keys:
        document["retryKeys"] = [
            {"messageId": message_id, "fingerprint": fingerprint}
            for message_id, fingerprint in record.retry_keys
        ]
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def owner_from_document(document: dict[str, Any]) -> Caller:
    """The ``"owner": {"name", "workspace"}`` of a record file (task files here, proxy
    ownership records in ``gateway.proxy_owners``); ValueError with a reason if bad."""
    owner = document.get("owner")
    if not isinstance(owner, dict):
        raise ValueError("owner is missing")
    name, workspace = owner.get("name"), owner.get("workspace", "")
    if not isinstance(name, str) or not name or not isinstance(workspace, str):
        raise ValueError("owner must have a name and a workspace string")
    return Caller(name=name, workspace=workspace)


def remove_inbox_files(workspace: Path, task: pb.Task) -> None:
    """(blocking) Remove the inbox files the task's messages brought (the parts whose
    ``a2a-gateway.savedAs`` names a file under ``inbox/``): only regular files inside
    the workspace's inbox, reached without symlinks."""
    inbox = os.path.realpath(workspace / INBOX_FOLDER)
    for message in [*task.history, task.status.message]:
        for part in message.parts:
            saved = part.metadata.fields.get(SAVED_AS_KEY)
            relative = saved.string_value if saved is not None else ""
            if not relative.startswith(f"{INBOX_FOLDER}/"):
                continue
            target = os.path.join(workspace, relative)
            real = os.path.realpath(target)
            if real.startswith(inbox + os.sep) and not os.path.islink(target):
                with contextlib.suppress(OSError):
                    os.unlink(real)


def decode_record(
    data: bytes, task_id: str
) -> tuple[pb.Task, Caller, list[pb.TaskPushNotificationConfig]]:
    """Parse a task file; raise ValueError (with a reason, never file content) if bad."""
    decoded = decode_document(data, task_id)
    return decoded.task, decoded.owner, decoded.configs


class Decoded(NamedTuple):
    """Everything a task file holds."""

    task: pb.Task
    owner: Caller
    configs: list[pb.TaskPushNotificationConfig]
    versions: dict[str, str]  # pushConfigVersions: config id -> A2A version
    retry_keys: tuple[MessageKey, ...]


def decode_document(data: bytes, task_id: str) -> Decoded:
    """:func:`decode_record` with ``pushConfigVersions`` and ``retryKeys``."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ValueError("not valid JSON") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    owner = owner_from_document(document)
    raw_task, raw_configs = document.get("task"), document.get("pushConfigs", [])
    if not isinstance(raw_task, dict) or not isinstance(raw_configs, list):
        raise ValueError("task must be an object and pushConfigs a list")
    try:
        task = proto_dict.task_from_dict(raw_task)  # the common shapes, ~7x faster
        if task is None:
            task = json_format.ParseDict(raw_task, pb.Task(), ignore_unknown_fields=True)
        configs = [
            json_format.ParseDict(c, pb.TaskPushNotificationConfig(), ignore_unknown_fields=True)
            for c in raw_configs
        ]
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError):
        raise ValueError("task or push configs do not parse") from None
    if task.id != task_id:
        raise ValueError("task id does not match the file name")
    if not task.HasField("status") or task.status.state == pb.TASK_STATE_UNSPECIFIED:
        raise ValueError("task has no status")
    raw_versions = document.get("pushConfigVersions", {})
    if not isinstance(raw_versions, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw_versions.items()
    ):
        raise ValueError("pushConfigVersions must map config ids to version strings")
    return Decoded(task, owner, configs, raw_versions, _retry_keys(document))


def _retry_keys(document: dict[str, Any]) -> tuple[MessageKey, ...]:
    raw = document.get("retryKeys", [])
    if not isinstance(raw, list):
        raise ValueError("retryKeys must be a list")
    keys: list[MessageKey] = []
    for entry in raw:
        message_id = entry.get("messageId") if isinstance(entry, dict) else None
        fingerprint = entry.get("fingerprint") if isinstance(entry, dict) else None
        if not isinstance(message_id, str) or not isinstance(fingerprint, str):
            raise ValueError("retryKeys must hold messageId and fingerprint strings")
        keys.append((message_id, fingerprint))
    return tuple(keys)


class _TaskFiles(TaskStore):
    """A workspace's task files: where they are, the index over them and their atomic
    writes (:class:`WorkspaceTaskStore` reads, lists and expires them)."""

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
    ) -> None:
        self.workspace = Path(workspace)
        self.folder = self.workspace / TASKS_FOLDER
        self.fsync = fsync
        self.box = SecretBox(self.workspace)
        self._dir = str(self.folder)
        self._folder_ready = False
        self._unnamed_files = _O_TMPFILE != 0
        # Recently loaded records, validated by the file's stamp before use.
        self._cache: ByteLRU[str, tuple[_Stamp, _Loaded | object]] = ByteLRU(
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
            self._dir, task_bytes=event_log_bytes, fsync=fsync
        )

    @abc.abstractmethod
    def _parse_summary(self, task_id: str, path: str) -> Parsed:
        """(:class:`WorkspaceTaskStore`) What the index keeps of one file."""

    def path(self, task_id: str) -> Path:
        return self.folder / f"{task_id}.json"

    def _start(self) -> TaskIndex:
        if not self._started:
            self._started = True
            self.index.start()
        return self.index

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

    # --- writing ---------------------------------------------------------------------

    async def save(self, record: TaskRecord) -> None:
        task = record.task
        task_id = task.id
        if not valid_id(task_id):
            raise ValueError(f"invalid task id {task_id!r}")
        data = encode_record(record, self.box)
        owner, summary = record.owner, TaskSummary.of(task)  # before any wait
        if not self.fsync:
            # Inline: faster than a thread hand-off without fsync (module doc).
            self._wrote(task_id, owner, summary, self._write_atomically(task_id, data))
            return
        if self._closed:  # its index is closed too: nothing written, the caller knows
            raise RuntimeError(f"task store {self.workspace} is closed")
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="a2a-task-write")
        loop = asyncio.get_running_loop()
        written = loop.run_in_executor(self._writer, self._write_atomically, task_id, data)
        self._writes_asked += 1

        def landed(done: asyncio.Future[_Stamp]) -> None:
            # On the loop, in the order of the writes (one writer thread), and before
            # the save returns; also when the save was cancelled while it waited.
            if not done.cancelled() and done.exception() is None:
                self._wrote(task_id, owner, summary, done.result())

        written.add_done_callback(landed)
        await asyncio.shield(written)

    def _forget(self, task_id: str) -> None:
        """The task's file was just written or removed: drop its cached record, and
        tell each read-ahead under way that what it read of the file may be stale."""
        self._cache.pop(task_id)
        self._read_ahead.pop(task_id, None)
        for changed in self._changed_during:
            changed.add(task_id)

    def _wrote(self, task_id: str, owner: Caller, summary: TaskSummary, stamp: _Stamp) -> None:
        """A task file was written: its index row follows it."""
        # Not cached: most tasks written are never read back, and the next read fills
        # the record cache (stat-validated like any other read).
        self._forget(task_id)
        index = self._start() if not self._started else self.index
        index.put(owner, summary, stamp)
        index.wrote_folder()

    def _write_atomically(self, task_id: str, data: bytes) -> _Stamp:
        if not self._folder_ready:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._folder_ready = True
        path = f"{self._dir}/{task_id}.json"
        stamp = None
        if self._unnamed_files:
            stamp = self._write_unnamed(path, task_id, data)
        if stamp is None:
            stamp = self._write_renamed(path, task_id, data)
        if self.fsync:
            fsync_folder(self._dir)
        return stamp

    def _write_unnamed(self, path: str, task_id: str, data: bytes) -> _Stamp | None:
        """Linux: write an unnamed file (O_TMPFILE) and link it in. A new task file
        takes one directory change instead of three (create, rename, remove), about a
        quarter less kernel time; a replaced one is linked to a temp name and renamed.
        None (and never again in this store) when the system cannot do it."""
        try:
            fd = os.open(self._dir, _O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # the folder was removed under us
            self.folder.mkdir(parents=True, exist_ok=True)
            return None
        except OSError:
            self._unnamed_files = False  # file system without O_TMPFILE
            return None
        try:
            stamp = self._fill(fd, data)
            source = f"/proc/self/fd/{fd}"
            try:
                # dst_dir_fd makes Python call linkat(..., AT_SYMLINK_FOLLOW), which
                # links the open file itself; the absolute path ignores that fd.
                os.link(source, path, dst_dir_fd=_root_fd(), follow_symlinks=True)
            except FileExistsError:
                tmp = self._temp_name(task_id)
                os.link(source, tmp, dst_dir_fd=_root_fd(), follow_symlinks=True)
                with removed_on_failure(tmp):
                    os.replace(tmp, path)
            except OSError:
                if os.path.isdir(self._dir):
                    self._unnamed_files = False  # no /proc, or linkat refused: rename
                else:
                    self.folder.mkdir(parents=True, exist_ok=True)  # removed under us
                return None
        finally:
            os.close(fd)
        return stamp

    def _write_renamed(self, path: str, task_id: str, data: bytes) -> _Stamp:
        """Write a temp file in the folder, then rename it over the task file."""
        tmp = self._temp_name(task_id)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileNotFoundError:  # the folder was removed under us
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, flags, 0o600)
        with removed_on_failure(tmp):
            try:
                stamp = self._fill(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        return stamp

    def _fill(self, fd: int, data: bytes) -> _Stamp:
        write_all(fd, data)
        if self.fsync:
            os.fsync(fd)
        return _stamp(os.fstat(fd))

    def _temp_name(self, task_id: str) -> str:
        return temp_path(self._dir, task_id)


class WorkspaceTaskStore(_TaskFiles):
    """Tasks as files under ``<workspace>/.a2a/tasks/`` (see the module docstring)."""

    # --- reading ---------------------------------------------------------------------

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        loaded = self._read(task_id)
        if loaded is None or loaded.owner != owner:
            return None
        configs = [pb.TaskPushNotificationConfig.FromString(data) for data in loaded.push]
        versions = dict(loaded.push_versions)
        task = pb.Task.FromString(loaded.task_bytes)
        return TaskRecord(task, owner, configs, versions, retry_keys=list(loaded.retry_keys))

    def _read(self, task_id: str) -> _Loaded | None:
        if not valid_id(task_id):
            return None
        read_at = self._read_ahead.pop(task_id, None)
        if read_at is not None and time.monotonic() - read_at < READ_AHEAD_FRESH_S:
            ahead = self._cache.get(task_id)
            if ahead is not None:
                return ahead[1] if isinstance(ahead[1], _Loaded) else None
        path = f"{self._dir}/{task_id}.json"
        try:
            st = os.stat(path)
        except OSError:
            self._cache.pop(task_id)
            return None
        stamp = _stamp(st)
        cached = self._cache.get(task_id)
        if cached is not None and cached[0] == stamp:
            value = cached[1]
            return value if isinstance(value, _Loaded) else None
        return self._read_file(task_id, path)

    def _read_file(self, task_id: str, path: str) -> _Loaded | None:
        parsed = self._parse_file(task_id, path)
        if parsed is None:
            self._cache.pop(task_id)
            return None
        return self._keep(task_id, path, *parsed)

    @staticmethod
    def _read_raw(
        path: str, budget: _ReadBudget | None = None
    ) -> tuple[_Stamp, bytes | None] | None:
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
                return _stamp(st), None
            if budget is not None and not budget.admit(st.st_size):
                return None
            return _stamp(st), _read_all(fd, st.st_size)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _parse_file(
        self, task_id: str, path: str, budget: _ReadBudget | None = None
    ) -> tuple[_Stamp, _Loaded | str] | None:
        """The file's stamp and its record, or the reason it is malformed; None when it
        cannot be opened or read (or ``budget`` does not admit it)."""
        raw = self._read_raw(path, budget)
        if raw is None:
            return None
        stamp, data = raw
        try:
            if data is None:
                raise ValueError("not a regular file")
            decoded = decode_document(data, task_id)
        except ValueError as exc:
            return stamp, str(exc)
        return stamp, _Loaded(
            decoded.owner,
            TaskSummary.of(decoded.task),
            decoded.task.SerializeToString(),
            tuple(c.SerializeToString() for c in self._open_configs(decoded.configs, path)),
            tuple(decoded.versions.items()),
            decoded.retry_keys,
        )

    def _parse_summary(self, task_id: str, path: str) -> Parsed:
        """(on the index's maintenance thread) What the index keeps of one file."""
        raw = self._read_raw(path)
        if raw is None:
            return None
        stamp, data = raw
        if data is None:
            return stamp, None
        try:
            decoded = decode_document(data, task_id)
        except ValueError:
            return stamp, None
        return stamp, (decoded.owner, TaskSummary.of(decoded.task), decoded.retry_keys)

    def _keep(
        self, task_id: str, path: str, stamp: _Stamp, parsed: _Loaded | str
    ) -> _Loaded | None:
        """Remember a parsed file in the cache; log a malformed one once per version
        of the file (while it is cached)."""
        if isinstance(parsed, str):
            previous = self._cache.peek(task_id)
            if previous is None or previous[0] != stamp:
                log.warning("task file is malformed (%s), read as no such task: %s", parsed, path)
            self._cache.put(task_id, (stamp, _MALFORMED), _ENTRY_OVERHEAD)
            return None
        size = len(parsed.task_bytes) + sum(len(p) for p in parsed.push) + _ENTRY_OVERHEAD
        self._cache.put(task_id, (stamp, parsed), size)
        return parsed

    def _open_configs(
        self, configs: list[pb.TaskPushNotificationConfig], path: str
    ) -> list[pb.TaskPushNotificationConfig]:
        """The configs with their secrets opened; one that does not open is dropped."""
        opened: list[pb.TaskPushNotificationConfig] = []
        for config in configs:
            try:
                opened.append(self.box.open_push_config(config))
            except SecretBoxError as exc:
                log.warning(
                    "push config %s dropped: its secret does not open (%s): %s",
                    config.id,
                    exc,
                    path,
                )
        return opened

    async def prefetch_for(self, owner: Caller, task_ids: Sequence[str], max_bytes: int) -> None:
        await self.prefetch(task_ids, max_bytes)

    async def prefetch(self, task_ids: Sequence[str], max_bytes: int) -> None:
        """Read the files of these tasks that the record cache lacks on the reader
        threads, ``READ_THREADS`` at once, as many as fit ``max_bytes`` of file (at
        least one): a ListTasks page over a large workspace is mostly cold files, one
        disk read each, which must neither run one after the other nor on the event
        loop; the byte budget keeps a page of huge tasks from being read whole when
        its answer will stop after the first few. Each thread takes the next file as
        it finishes one (no pass of stats first, no wait for the slowest of a batch);
        files are started in page order, so the budget admits about the page's
        prefix. The loads that follow find them cached (stat-validated)."""
        wanted = [t for t in task_ids if valid_id(t) and self._cache.peek(t) is None]
        if len(wanted) < 2:
            return
        loop = asyncio.get_running_loop()
        pool = _reader_pool()
        jobs = iter([(t, f"{self._dir}/{t}.json") for t in wanted])
        taking = threading.Lock()
        budget = _ReadBudget(max_bytes)
        done: list[tuple[str, str, tuple[_Stamp, _Loaded | str] | None]] = []

        def read_files() -> None:
            # (reader thread) Takes the next file until none is left: a few hand-offs
            # per page, not one future per file (~30 us each on the loop).
            while not budget.spent:  # then the rest is not even opened
                with taking:
                    job = next(jobs, None)
                if job is None:
                    return
                done.append((*job, self._parse_file(*job, budget)))

        readers = min(READ_THREADS, len(wanted))
        changed: set[str] = set()
        self._changed_during.append(changed)
        try:
            await asyncio.gather(*(loop.run_in_executor(pool, read_files) for _ in range(readers)))
        finally:
            self._changed_during.remove(changed)
        now = time.monotonic()
        if len(self._read_ahead) > 4 * READ_THREADS:  # drop what no page took
            self._read_ahead = {
                t: at for t, at in self._read_ahead.items() if now - at < READ_AHEAD_FRESH_S
            }
        for task_id, path, result in done:
            if task_id in changed:  # what it read may be older than the file now
                continue
            if result is not None and self._keep(task_id, path, *result) is not None:
                self._read_ahead[task_id] = now

    # --- listing and retry keys (the index) ------------------------------------------

    async def before_listing(self, owner: Caller) -> None:
        """The cheap check: a folder changed behind our back starts a reconcile. While
        one runs (that, the periodic one, or the one after an unclean stop), a listing
        over a small folder waits for it; over a large one it answers from what is
        indexed (see ``task_index``)."""
        index = self._start()
        await index.opened()  # on the index's writer thread (it may wait for a lock)
        index.check_folder()
        if index.reconciling and self._folder_is_small():
            await index.wait_reconciled()

    def _folder_is_small(self) -> bool:
        """Whether the folder holds at most about ``RECONCILE_WAIT_ROWS`` entries,
        judged by the folder's own size (ext4: ~4 KiB per ~80 names; never shrinks)."""
        try:
            return os.stat(self._dir).st_size <= RECONCILE_WAIT_ROWS * 64
        except OSError:
            return True

    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing:
        return await self._start().listing(owner, flt, window)

    async def active_ids(self, owner: Caller) -> list[str]:
        return await self._start().active_ids(owner)

    async def refresh(self, owner: Caller, task_ids: Iterable[str]) -> None:
        """Listed tasks that did not load (removed, malformed or handed to another
        owner by hand): their index rows follow their files now; a file that could
        not be read just now but is there keeps its row."""
        index = self._start()
        for task_id in task_ids:
            path = f"{self._dir}/{task_id}.json"
            parsed = self._parse_summary(task_id, path)
            if parsed is None and unreadable_for_now(path):
                continue  # not read just now, but there: a later listing tries again
            if parsed is None or parsed[1] is None:
                index.remove(task_id)
            else:
                stamp, (file_owner, summary, _) = parsed[0], parsed[1]
                index.put(file_owner, summary, stamp)

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return self.index.find_message(owner, message_id, fingerprint)

    async def lookup_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        # Started: a reconcile owed at open (the keys it recovers) runs.
        return await self._start().lookup_message(owner, message_id, fingerprint)

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        self.index.remember_message(owner, message_id, fingerprint, task_id)

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

    # --- retention -------------------------------------------------------------------

    async def expire(self, cutoff_ns: int, limit: int, *, files: bool = False) -> int:
        """Remove up to ``limit`` settled tasks whose status is older than the cutoff
        (file, then index row; with ``files`` also their inbox files). File work runs
        on the index's maintenance thread. How many were removed."""
        index = self._start()
        candidates = await index.expired(cutoff_ns, limit)
        if not candidates:
            return 0
        removed = await index.in_worker(lambda: self._remove_files(candidates, files))
        for task_id, stamp in removed:
            index.delete_if(task_id, stamp)
            self._forget(task_id)
            self.event_log.forget(task_id)
        index.wrote_folder()
        index.commit()
        return len(removed)

    def _remove_files(
        self, candidates: list[tuple[str, _Stamp]], inbox_files: bool
    ) -> list[tuple[str, _Stamp]]:
        """(on the maintenance thread) Unlink the task files still as indexed."""
        removed: list[tuple[str, _Stamp]] = []
        for task_id, stamp in candidates:
            path = f"{self._dir}/{task_id}.json"
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                removed.append((task_id, stamp))  # gone already: only the row is left
                continue
            except OSError:
                continue
            if _stamp(st) != stamp:
                continue  # written since it was indexed: the next pass decides
            if inbox_files:
                self._remove_inbox_files(task_id, path)
            self.event_log.remove_file(task_id)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not remove expired task file %s: %s", path, exc)
                continue
            removed.append((task_id, stamp))
        return removed

    def _remove_inbox_files(self, task_id: str, path: str) -> None:
        raw = self._read_raw(path)
        if raw is None or raw[1] is None:
            return
        try:
            task, _, _ = decode_record(raw[1], task_id)
        except ValueError:
            return
        remove_inbox_files(self.workspace, task)


class WorkspaceTaskStores(TaskStore):
    """Routes each owner to the store of its own workspace.

    Callers authenticated from ``<ws>/.a2a/callers.json`` have ``workspace == str(ws)``;
    their tasks live in ``<ws>/.a2a/tasks``. Callers without a workspace (anonymous)
    use ``default``. ``options`` go to every :class:`WorkspaceTaskStore`.
    """

    kind = "files"

    def __init__(self, default: Path, *, fsync: bool = False, **options: Any) -> None:
        self.fsync = fsync
        self.options = options
        self.default = WorkspaceTaskStore(default, fsync=fsync, **options)
        self._stores: dict[str, WorkspaceTaskStore] = {}
        self._logging: dict[str, WorkspaceTaskStore] = {}  # the store of each open log

    def store_for(self, owner: Caller) -> WorkspaceTaskStore:
        if not owner.workspace:
            return self.default
        store = self._stores.get(owner.workspace)
        if store is None:
            store = self._stores[owner.workspace] = WorkspaceTaskStore(
                Path(owner.workspace), fsync=self.fsync, **self.options
            )
        return store

    def stores(self) -> list[WorkspaceTaskStore]:
        return [self.default, *self._stores.values()]

    async def count_by_state(self) -> Mapping[int, int] | None:
        """The sums over the workspaces' stores opened so far (a workspace whose callers
        have not called since the start is not counted), each folder once: the default
        store may be a workspace's too (they share its index)."""
        by_index = {id(store.index): store for store in self.stores()}
        total: Counter[int] = Counter()
        for store in by_index.values():
            total.update(await store.count_by_state() or {})
        return total

    def store_gauges(self) -> Mapping[str, int]:
        """The rebuilds of the workspaces' indexes opened so far, each index once."""
        indexes = {id(store.index): store.index for store in self.stores()}
        return {"index_rebuilds": sum(index.rebuilds for index in indexes.values())}

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        return await self.store_for(owner).load(owner, task_id)

    async def save(self, record: TaskRecord) -> None:
        await self.store_for(record.owner).save(record)

    async def before_listing(self, owner: Caller) -> None:
        await self.store_for(owner).before_listing(owner)

    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing:
        return await self.store_for(owner).listing(owner, flt, window)

    async def active_ids(self, owner: Caller) -> list[str]:
        return await self.store_for(owner).active_ids(owner)

    async def refresh(self, owner: Caller, task_ids: Iterable[str]) -> None:
        await self.store_for(owner).refresh(owner, task_ids)

    async def prefetch_for(self, owner: Caller, task_ids: Sequence[str], max_bytes: int) -> None:
        await self.store_for(owner).prefetch_for(owner, task_ids, max_bytes)

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return self.store_for(owner).find_message(owner, message_id, fingerprint)

    async def lookup_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return await self.store_for(owner).lookup_message(owner, message_id, fingerprint)

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        self.store_for(owner).remember_message(owner, message_id, fingerprint, task_id)

    def start_event_log(self, owner: Caller, task_id: str) -> int | None:
        store = self._logging[task_id] = self.store_for(owner)
        return store.start_event_log(owner, task_id)

    async def open_event_log(self, owner: Caller, task_id: str, *, create: bool) -> int | None:
        store = self.store_for(owner)
        last = await store.open_event_log(owner, task_id, create=create)
        if last is not None:
            self._logging[task_id] = store
        return last

    def close_event_log(self, task_id: str) -> None:
        store = self._logging.pop(task_id, None)
        if store is not None:
            store.close_event_log(task_id)

    def log_event(self, task_id: str, event: pb.StreamResponse, state: int | None) -> int | None:
        store = self._logging.get(task_id)
        return None if store is None else store.log_event(task_id, event, state)

    async def event_bounds(self, owner: Caller, task_id: str) -> tuple[int, int] | None:
        return await self.store_for(owner).event_bounds(owner, task_id)

    async def read_events(
        self, task_id: str, after_seq: int, upto_seq: int, owner: Caller | None = None
    ) -> list[pb.StreamResponse]:
        store = self._logging.get(task_id) if owner is None else self.store_for(owner)
        return [] if store is None else await store.read_events(task_id, after_seq, upto_seq)

    async def readiness(self) -> str | None:
        """The first store not ready (the default workspace's and those opened so far)."""
        for store in self.stores():
            why = await store.readiness()
            if why is not None:
                return why
        return None

    async def aclose(self) -> None:
        for store in self.stores():
            await store.aclose()
