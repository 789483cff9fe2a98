"""Who owns each task seen through the proxy: :class:`TaskOwners`.

The proxy answers a task id to one of our callers and from then on that task is
TaskNotFound for every other caller (see :mod:`.proxy`). The owner of each id is kept in
memory, bounded (the least recently used ids are dropped first), and, when the gateway
has a workspace, in one record file per task that is final once written::

    <workspace>/.a2a/proxy-tasks/<taskId>.json
    {"version": 1, "owner": {"name": "alice", "workspace": "/srv/ws"}}

The memory is a cache in front of the files: an id it does not hold is looked up on
disk, so ownership survives restarts and eviction from the bound. A task is owned only
when it was created through this proxy: the caller whose SendMessage the upstream
answered with it claims it. An id known nowhere (created upstream by someone else, or
through another gateway) is nobody's: TaskNotFound for every caller, and never listed.
Once a record exists, no later claim changes it, not even one from another gateway
process sharing the workspace (records are created with ``link``, which never replaces
a file).

- Only ids matching ``[A-Za-z0-9_-]{1,100}`` (``ids.valid_id``) ever become a
  path; any other id the upstream uses is owned in memory only, as without a workspace.
- A record that does not parse (bad JSON, wrong version, no owner, not a regular file,
  unreadable) makes its task TaskNotFound for everyone; it is logged once, with its
  path, when it is read. Records are read once and cached: an operator who edits or
  removes one restarts the gateway for that to apply.
- Writes are atomic: the record is written to a temp file in the folder
  (``.<id>.<pid>.<n>.tmp``, stale ones removed when the folder is opened) that is then
  hard-linked in as the record. A reader, or a process killed at any instant, sees no
  record or a whole one. ``fsync=True`` (``serve --fsync``) makes it durable before the
  caller gets the answer. A record that cannot be written (disk full, permissions) is
  logged as an error and the claim is kept in memory only.
- Without a workspace (or with ``--store memory``) there are no files: the memory holds
  every owner, and an id dropped from the bound, or any id after a restart, is known
  nowhere, so nobody's.

File I/O runs inline on the event loop. Measured on this host (ext4 on a virtual disk,
5,000 ids, 3 rounds): a claim (create, write, link, unlink the temp file) takes 70-140
us, a lookup 6 us with or without a record, and ``asyncio.to_thread`` alone 45-75 us per
call. A claim happens once per task, on a call that already waited for the upstream (a
network round trip, milliseconds), so a thread would cost as much as it saves. With
``--fsync`` a claim also waits for two fsyncs (the file, then the folder), inline as in
the workspace task store.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import Final

import orjson

from a2a_gateway.local.atomic_files import fsync_folder, remove_temp_files, temp_path, write_file
from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.protocol.context import Caller
from a2a_gateway.protocol.errors import TaskNotFoundError
from a2a_gateway.server.file_store import owner_from_document
from a2a_gateway.server.ids import valid_id
from lf.a2a.v1 import a2a_pb2 as pb

log = logging.getLogger(__name__)

#: Task ids remembered in memory per proxy (least recently used dropped first).
MAX_OWNED_TASKS = 100_000
RECORDS_FOLDER = RELATIVE.proxy_tasks
FORMAT_VERSION = 1
#: A record is ~80 bytes; anything much larger is not one of ours.
MAX_RECORD_BYTES = 64 * 1024

#: (workspace, name) of a caller.
Owner = tuple[str, str]
#: The owner of a task whose record does not parse: no caller (every caller has a name).
NOBODY: Final[Owner] = ("", "")


def owner_of(caller: Caller) -> Owner:
    return (caller.workspace, caller.name)


def encode_owner_record(owner: Owner) -> bytes:
    """The bytes of a record file."""
    workspace, name = owner
    document = {"version": FORMAT_VERSION, "owner": {"name": name, "workspace": workspace}}
    return orjson.dumps(document, option=orjson.OPT_APPEND_NEWLINE)


def decode_owner_record(data: bytes) -> Owner:
    """The owner in a record file; ValueError (a reason, never file content) if bad."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ValueError("not valid JSON") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    version = document.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise ValueError(f"version must be {FORMAT_VERSION}")
    owner = owner_from_document(document)  # the same owner shape as task files
    return (owner.workspace, owner.name)


class TaskOwners:
    """Which of our callers each task id was answered to (see the module docstring).

    ``folder`` holds the record files (None: memory only); ``limit`` bounds the memory.
    """

    def __init__(
        self, limit: int = MAX_OWNED_TASKS, *, folder: Path | None = None, fsync: bool = False
    ) -> None:
        self.limit = limit
        self.folder = folder
        self.fsync = fsync
        self._dir = str(folder) if folder is not None else ""
        self._folder_ready = False
        self._owners: collections.OrderedDict[str, Owner] = collections.OrderedDict()
        if folder is not None:
            remove_temp_files(self._dir)

    @classmethod
    def in_workspace(cls, workspace: Path, *, fsync: bool = False) -> TaskOwners:
        """Owners recorded under ``<workspace>/.a2a/proxy-tasks/``."""
        return cls(folder=workspace / RECORDS_FOLDER, fsync=fsync)

    def in_memory(self) -> int:
        """How many ids the memory holds now."""
        return len(self._owners)

    def path(self, task_id: str) -> Path | None:
        """The record file of ``task_id`` (None: memory only, or an id that is no name)."""
        if self.folder is None or not valid_id(task_id):
            return None
        return self.folder / f"{task_id}.json"

    # --- questions ------------------------------------------------------------------------

    def owner(self, task_id: str) -> Owner | None:
        """The owner of ``task_id``, from memory or its record; None when known nowhere."""
        owner = self._owners.get(task_id)
        if owner is not None:
            self._owners.move_to_end(task_id)
            return owner
        owner = self._load(task_id)
        if owner is not None:
            self._remember(task_id, owner)
        return owner

    def owns(self, caller: Caller, task_id: str) -> bool:
        """Whether ``caller`` created ``task_id`` through this proxy (a task known
        nowhere is nobody's)."""
        return self.owner(task_id) == owner_of(caller)

    def check(self, caller: Caller, task_id: str) -> None:
        """TaskNotFound unless ``caller`` owns ``task_id`` (whether it exists upstream,
        or belongs to another caller, is not revealed)."""
        if task_id and not self.owns(caller, task_id):
            raise _not_found(task_id)

    # --- claims ---------------------------------------------------------------------------

    def claim(self, caller: Caller, task_id: str) -> None:
        """Record ``caller`` as the owner of a task id the upstream answered to their
        message (SendMessage and its stream only: that is how a task is created through
        the proxy), unless it has an owner already; TaskNotFound when that owner is
        someone else (the upstream answered another caller's task)."""
        if not task_id:
            return
        mine = owner_of(caller)
        owner = self.owner(task_id)
        if owner is None:
            owner = self._create(task_id, mine)
            self._remember(task_id, owner)
        if owner != mine:
            raise _not_found(task_id)

    # --- memory ---------------------------------------------------------------------------

    def _remember(self, task_id: str, owner: Owner) -> None:
        self._owners[task_id] = owner
        self._owners.move_to_end(task_id)
        while len(self._owners) > self.limit:
            self._owners.popitem(last=False)

    # --- files ----------------------------------------------------------------------------

    def _load(self, task_id: str) -> Owner | None:
        """The owner in the task's record; None when it has none; NOBODY when the record
        does not parse (logged with its path)."""
        if self.folder is None or not valid_id(task_id):
            return None
        path = f"{self._dir}/{task_id}.json"
        try:
            # O_NONBLOCK: a FIFO planted under a task's name must not hang the server.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # a symlink (ELOOP), no permission: fail closed
            return _malformed(path, exc.strerror or "cannot be opened")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return _malformed(path, "not a regular file")
            data = os.read(fd, MAX_RECORD_BYTES + 1)
        except OSError as exc:
            return _malformed(path, exc.strerror or "cannot be read")
        finally:
            os.close(fd)
        if len(data) > MAX_RECORD_BYTES:
            return _malformed(path, "too large")
        try:
            return decode_owner_record(data)
        except ValueError as exc:
            return _malformed(path, str(exc))

    def _create(self, task_id: str, owner: Owner) -> Owner:
        """Write the record of ``owner`` unless the task has one; the owner it has then.

        Memory only (``owner`` returned, nothing written) without a folder, for an id
        that is no file name, or when the write fails (logged)."""
        if self.folder is None or not valid_id(task_id):
            return owner
        path = f"{self._dir}/{task_id}.json"
        try:
            if not self._folder_ready:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._folder_ready = True
            tmp = temp_path(self._dir, task_id)
            self._write_file(tmp, encode_owner_record(owner))
            try:
                # link, unlike rename, never replaces: a record that exists is final.
                os.link(tmp, path)
            except FileExistsError:
                existing = self._load(task_id)  # another process claimed it first
                return owner if existing is None else existing
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if self.fsync:
                fsync_folder(self._dir)
        except OSError as exc:
            self._folder_ready = False  # the folder may be gone: make it again next time
            log.error(
                "proxy task record not written (%s), its owner is kept in memory only: %s",
                exc.strerror or exc,
                path,
            )
        return owner

    def _write_file(self, tmp: str, data: bytes) -> None:
        try:
            write_file(
                tmp, data, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, fsync=self.fsync
            )
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def event_task_id(event: pb.StreamResponse) -> str:
    """The task a stream event is about ("" for a message without one)."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        return event.task.id
    if kind == "status_update":
        return event.status_update.task_id
    if kind == "artifact_update":
        return event.artifact_update.task_id
    if kind == "message":
        return event.message.task_id
    return ""


def _not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(f"Task {task_id} not found", metadata={"taskId": task_id})


def _malformed(path: str, reason: str) -> Owner:
    log.warning(
        "proxy task record is malformed (%s), its task is not found for anyone: %s", reason, path
    )
    return NOBODY


__all__ = [
    "MAX_OWNED_TASKS",
    "NOBODY",
    "RECORDS_FOLDER",
    "Owner",
    "TaskOwners",
    "decode_owner_record",
    "encode_owner_record",
    "event_task_id",
    "owner_of",
]
