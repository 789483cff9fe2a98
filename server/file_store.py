"""The workspace task store: one JSON file per task, ``<workspace>/.a2a/tasks/<id>.json``.

File format (ProtoJSON for the protocol objects; edit it by hand if you like)::

    {"version": 1,
     "owner": {"name": "travel-bot", "workspace": "/srv/ws"},
     "task": {...Task...},
     "pushConfigs": [{...TaskPushNotificationConfig...}],
     "pushConfigVersions": {"<config id>": "0.3"}}

``pushConfigVersions`` (only when there are any) names the configs registered over an
A2A version other than 1.0: their deliveries take that version's shape.

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
killed process just vanishes). Stale temp files are removed when a store opens the
folder.

Reads are fresh: every load ``stat``s the file; a cache of the last 4096 records read,
as serialized protobuf bytes, is used only while the file's (mtime, size, inode) stamp
is unchanged, so an edit or removal on disk applies to the next request. ListTasks
uses a per-task summary index kept the same way (filled by writes and reads). A
malformed or unreadable file (bad JSON, bad task, id not matching its name) reads as
"no such task"; it is logged once per version of the file, with its path only.

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
``fsync=True`` (``serve --fsync``) makes every write durable before it returns.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import stat
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import json_format

from a2a_gateway.protocol import proto_dict
from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .atomic_files import fsync_folder, remove_temp_files, temp_path, write_all
from .lifecycle import valid_id
from .secret_box import SecretBox, SecretBoxError
from .task_store import TaskRecord, TaskStore, TaskSummary

log = logging.getLogger(__name__)

TASKS_FOLDER = Path(".a2a") / "tasks"
FORMAT_VERSION = 1
CACHE_ENTRIES = 4096

_Stamp = tuple[int, int, int]
_O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)
_root: list[int] = []


def _root_fd() -> int:
    """A directory fd held for the process's life, only to make ``os.link`` use
    ``linkat`` (the paths given with it are absolute, so it is never used to resolve)."""
    if not _root:
        _root.append(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    return _root[0]


class _Loaded:
    """A parsed task file: its owner, summary and serialized protobufs."""

    __slots__ = ("owner", "push", "push_versions", "summary", "task_bytes")

    def __init__(
        self,
        owner: Caller,
        summary: TaskSummary,
        task_bytes: bytes,
        push: tuple[bytes, ...],
        push_versions: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.owner = owner
        self.summary = summary
        self.task_bytes = task_bytes
        self.push = push
        self.push_versions = push_versions


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


def decode_record(
    data: bytes, task_id: str
) -> tuple[pb.Task, Caller, list[pb.TaskPushNotificationConfig], dict[str, str]]:
    """Parse a task file; raise ValueError (with a reason, never file content) if bad."""
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
    return task, owner, configs, raw_versions


class WorkspaceTaskStore(TaskStore):
    """Tasks as files under ``<workspace>/.a2a/tasks/`` (see the module docstring)."""

    def __init__(self, workspace: Path, *, fsync: bool = False) -> None:
        self.workspace = Path(workspace)
        self.folder = self.workspace / TASKS_FOLDER
        self.fsync = fsync
        self.box = SecretBox(self.workspace)
        self._dir = str(self.folder)
        self._folder_ready = False
        self._unnamed_files = _O_TMPFILE != 0
        # Recently loaded/saved records, validated by the file's stamp before use.
        self._cache: collections.OrderedDict[str, tuple[_Stamp, _Loaded | object]] = (
            collections.OrderedDict()
        )
        # Summaries for ListTasks (small; every task seen), validated the same way.
        self._index: dict[str, tuple[_Stamp, Caller, TaskSummary]] = {}
        self._scan: asyncio.Task[None] | None = None  # the ListTasks folder scan running
        self._saved_during_scan: set[str] | None = None
        remove_temp_files(self._dir)

    def path(self, task_id: str) -> Path:
        return self.folder / f"{task_id}.json"

    # --- reading ---------------------------------------------------------------------

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        loaded = self._read(task_id)
        if loaded is None or loaded.owner != owner:
            return None
        configs = [pb.TaskPushNotificationConfig.FromString(data) for data in loaded.push]
        versions = dict(loaded.push_versions)
        return TaskRecord(pb.Task.FromString(loaded.task_bytes), owner, configs, versions)

    def _read(self, task_id: str) -> _Loaded | None:
        if not valid_id(task_id):
            return None
        path = f"{self._dir}/{task_id}.json"
        try:
            st = os.stat(path)
        except OSError:
            self._cache.pop(task_id, None)
            return None
        stamp = _stamp(st)
        cached = self._cache.get(task_id)
        if cached is not None and cached[0] == stamp:
            self._cache.move_to_end(task_id)
            value = cached[1]
            return value if isinstance(value, _Loaded) else None
        return self._read_file(task_id, path)

    def _read_file(self, task_id: str, path: str) -> _Loaded | None:
        parsed = self._parse_file(task_id, path)
        if parsed is None:
            self._cache.pop(task_id, None)
            return None
        return self._keep(task_id, path, *parsed)

    def _parse_file(self, task_id: str, path: str) -> tuple[_Stamp, _Loaded | str] | None:
        """The file's stamp and its record, or the reason it is malformed; None when it
        cannot be opened or read. Touches no state of the store (runs in a thread for
        ListTasks)."""
        try:
            # O_NONBLOCK: a FIFO planted under a task's name must not hang the server.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            stamp = _stamp(st)
            data = _read_all(fd, st.st_size) if stat.S_ISREG(st.st_mode) else b""
        except OSError:
            return None
        finally:
            os.close(fd)
        try:
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file")
            task, owner, configs, versions = decode_record(data, task_id)
        except ValueError as exc:
            return stamp, str(exc)
        return stamp, _Loaded(
            owner,
            TaskSummary.of(task),
            task.SerializeToString(),
            tuple(c.SerializeToString() for c in self._open_configs(configs, path)),
            tuple(versions.items()),
        )

    def _keep(
        self, task_id: str, path: str, stamp: _Stamp, parsed: _Loaded | str
    ) -> _Loaded | None:
        """Remember a parsed file in the cache and the index; log a malformed one once
        per version of the file."""
        if isinstance(parsed, str):
            previous = self._cache.get(task_id)
            if previous is None or previous[0] != stamp:
                log.warning("task file is malformed (%s), read as no such task: %s", parsed, path)
            self._remember(task_id, stamp, _MALFORMED)
            self._index.pop(task_id, None)
            return None
        self._remember(task_id, stamp, parsed)
        self._index[task_id] = (stamp, parsed.owner, parsed.summary)
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

    def _remember(self, task_id: str, stamp: _Stamp, value: _Loaded | object) -> None:
        self._cache[task_id] = (stamp, value)
        self._cache.move_to_end(task_id)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)

    async def summaries(self, owner: Caller) -> list[TaskSummary]:
        """The owner's tasks, from the index after it is brought up to date with the
        folder. Listing the folder and parsing new or changed files runs in a worker
        thread, one scan at a time (concurrent calls share it): measured on 1.4 million
        task files, a listing takes ~9 s and the first one ~200 s, which must not stall
        every other request."""
        scan = self._scan
        if scan is None:
            scan = self._scan = asyncio.get_running_loop().create_task(
                self._refresh_index(), name="a2a-task-index-scan"
            )
            scan.add_done_callback(self._scan_done)
        await asyncio.shield(scan)  # a caller that gives up leaves the scan to others
        return [entry[2] for entry in self._index.values() if entry[1] == owner]

    def _scan_done(self, scan: asyncio.Task[None]) -> None:
        if self._scan is scan:
            self._scan = None  # the next ListTasks scans again
        if not scan.cancelled():
            scan.exception()  # an error reaches every waiter; none is left unretrieved

    async def _refresh_index(self) -> None:
        saved: set[str] = set()
        self._saved_during_scan = saved
        try:
            unreadable, gone, parsed = await asyncio.to_thread(self._scan_folder)
        finally:
            self._saved_during_scan = None
        # A task written while the thread ran has a newer index entry than the scan's.
        for task_id, path, stamp, record in parsed:
            if task_id not in saved:
                self._keep(task_id, path, stamp, record)
        for task_id in itertools.chain(gone, unreadable):
            if task_id not in saved:
                self._index.pop(task_id, None)

    def _scan_folder(
        self,
    ) -> tuple[list[str], set[str], list[tuple[str, str, _Stamp, _Loaded | str]]]:
        """(in a thread) The folder against the index: ids listed but unreadable, ids
        indexed but no longer listed, and every new or changed file parsed. Only reads
        the index (single dict lookups, and one ``list()`` that CPython runs whole under
        the GIL)."""
        index = self._index
        indexed = set(list(index))
        unreadable: list[str] = []
        parsed: list[tuple[str, str, _Stamp, _Loaded | str]] = []
        try:
            entries = os.scandir(self._dir)
        except OSError:
            return [], indexed, []
        with entries:
            for entry in entries:
                name = entry.name
                if not name.endswith(".json") or name.startswith("."):
                    continue
                task_id = name[:-5]
                if not valid_id(task_id):
                    continue
                indexed.discard(task_id)
                try:
                    stamp = _stamp(entry.stat(follow_symlinks=False))
                except OSError:
                    unreadable.append(task_id)
                    continue
                known = index.get(task_id)
                if known is not None and known[0] == stamp:
                    continue
                result = self._parse_file(task_id, entry.path)
                if result is None:
                    unreadable.append(task_id)
                else:
                    parsed.append((task_id, entry.path, *result))
        return unreadable, indexed, parsed

    async def aclose(self) -> None:
        """Stop a ListTasks scan in progress (its thread ends after the current file)."""
        scan = self._scan
        if scan is not None:
            scan.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scan

    # --- writing ---------------------------------------------------------------------

    async def save(self, record: TaskRecord) -> None:
        task = record.task
        task_id = task.id
        if not valid_id(task_id):
            raise ValueError(f"invalid task id {task_id!r}")
        data = encode_record(record, self.box)
        stamp = self._write_atomically(task_id, data)
        # Only the summary is kept: most tasks written are never read back, and the
        # next read fills the record cache (stat-validated like any other read).
        self._cache.pop(task_id, None)
        self._index[task_id] = (stamp, record.owner, TaskSummary.of(task))
        if self._saved_during_scan is not None:
            self._saved_during_scan.add(task_id)

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
                try:
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
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
        try:
            try:
                stamp = self._fill(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return stamp

    def _fill(self, fd: int, data: bytes) -> _Stamp:
        write_all(fd, data)
        if self.fsync:
            os.fsync(fd)
        return _stamp(os.fstat(fd))

    def _temp_name(self, task_id: str) -> str:
        return temp_path(self._dir, task_id)


class WorkspaceTaskStores(TaskStore):
    """Routes each owner to the store of its own workspace.

    Callers authenticated from ``<ws>/.a2a/callers.json`` have ``workspace == str(ws)``;
    their tasks live in ``<ws>/.a2a/tasks``. Callers without a workspace (anonymous)
    use ``default``.
    """

    def __init__(self, default: Path, *, fsync: bool = False) -> None:
        self.fsync = fsync
        self.default = WorkspaceTaskStore(default, fsync=fsync)
        self._stores: dict[str, WorkspaceTaskStore] = {}

    def store_for(self, owner: Caller) -> WorkspaceTaskStore:
        if not owner.workspace:
            return self.default
        store = self._stores.get(owner.workspace)
        if store is None:
            store = self._stores[owner.workspace] = WorkspaceTaskStore(
                Path(owner.workspace), fsync=self.fsync
            )
        return store

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        return await self.store_for(owner).load(owner, task_id)

    async def save(self, record: TaskRecord) -> None:
        await self.store_for(record.owner).save(record)

    async def summaries(self, owner: Caller) -> list[TaskSummary]:
        return await self.store_for(owner).summaries(owner)

    async def aclose(self) -> None:
        for store in [self.default, *self._stores.values()]:
            await store.aclose()
