"""Writing task files: atomic, inline or (fsync) on one writer thread in order."""

from __future__ import annotations

import asyncio
import mmap
import os
from concurrent.futures import ThreadPoolExecutor

from a2a_gateway.local.atomic_files import fsync_folder, removed_on_failure, temp_path, write_all
from a2a_gateway.protocol.context import Caller

from ..ids import valid_id
from ..task_states import TERMINAL
from ..task_store import TaskRecord, TaskSummary
from .folder import O_TMPFILE, Stamp, TaskFiles, file_stamp
from .task_file import encode_record

_root: list[int] = []

#: A new task file of at most this many bytes is created in place (see ``_create``):
#: a write of one page at offset 0 lands whole or not at all, also under SIGKILL.
CREATE_IN_PLACE_BYTES = mmap.PAGESIZE
#: Tasks written in a state that is not final, most recent last, at most this many: the
#: ones likely written again, whose next write goes straight to the replacing path (no
#: ``O_EXCL`` create or link that fails first, each a system call and an exception).
UNFINISHED_KEPT = 4096
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def _root_fd() -> int:
    """A directory fd held for the process's life, only to make ``os.link`` use
    ``linkat`` (the paths given with it are absolute, so it is never used to resolve)."""
    if not _root:
        _root.append(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    return _root[0]


class FileTaskWrites(TaskFiles):
    """Tasks' saves: each record written whole, atomically (see the package docstring)."""

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

        def landed(done: asyncio.Future[Stamp]) -> None:
            # On the loop, in the order of the writes (one writer thread), and before
            # the save returns; also when the save was cancelled while it waited.
            if not done.cancelled() and done.exception() is None:
                self._wrote(task_id, owner, summary, done.result())

        written.add_done_callback(landed)
        await asyncio.shield(written)

    def _wrote(self, task_id: str, owner: Caller, summary: TaskSummary, stamp: Stamp) -> None:
        """A task file was written: its index row follows it."""
        # Not cached: most tasks written are never read back, and the next read fills
        # the record cache (stat-validated like any other read).
        self._forget(task_id)
        unfinished = self._unfinished
        if summary.state in TERMINAL:
            unfinished.pop(task_id, None)
        else:
            unfinished[task_id] = None
            if len(unfinished) > UNFINISHED_KEPT:
                del unfinished[next(iter(unfinished))]
        index = self._start() if not self._started else self.index
        index.put(owner, summary, stamp, answer=True)  # (encode_record)
        index.wrote_folder()

    def _write_atomically(self, task_id: str, data: bytes) -> Stamp:
        if not self._folder_ready:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._folder_ready = True
        path = f"{self._dir}/{task_id}.json"
        stamp = None
        if self._unnamed_files:
            again = task_id in self._unfinished  # (a hint: both paths check)
            if not again and not self.fsync and len(data) <= CREATE_IN_PLACE_BYTES:
                stamp = self._create(path, data)
            if stamp is None:
                stamp = self._write_unnamed(path, task_id, data, again)
        if stamp is None:
            stamp = self._write_renamed(path, task_id, data)
        if self.fsync:
            fsync_folder(self._dir)
        return stamp

    def _create(self, path: str, data: bytes) -> Stamp | None:
        """A new task file, created in place (``O_EXCL``) and written with one
        ``write``: a third less kernel time than an unnamed file linked in (no link
        through /proc, no orphan-list entry). None when the file exists (a replacement:
        the unnamed file's path) or cannot be created so.

        Only here, where a write runs inline on the event loop from its open to its
        close (no fsync) and the record fits one page: a process killed between the
        open and the write leaves an empty file (a one-page write lands whole or not at
        all), never a part of one. That task was never answered (its file was not
        written), an empty file reads as no such task, and the index's reconcile removes
        empty task files from the event loop, where no write of this process can be
        half done (``task_index._Scan``). Nothing else reads a task file before its
        task is answered (its id unknown to anyone, the index row follows the write)."""
        try:
            fd = os.open(path, _CREATE_FLAGS, 0o600)
        except OSError:  # there already (a replacement), or removed under us
            return None
        with removed_on_failure(path):  # ours: O_EXCL created it
            try:
                stamp = self._fill(fd, data)  # (no fsync here: see the condition above)
            finally:
                os.close(fd)
        return stamp

    def _write_unnamed(
        self, path: str, task_id: str, data: bytes, again: bool = False
    ) -> Stamp | None:
        """Linux: write an unnamed file (O_TMPFILE) and link it in. A new task file
        takes one directory change instead of three (create, rename, remove), about a
        quarter less kernel time; a replaced one is linked to a temp name and renamed.
        None (and never again in this store) when the system cannot do it."""
        try:
            fd = os.open(self._dir, O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600)
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
                if not again:  # (again: most likely there, so replaced at once)
                    try:
                        os.link(source, path, dst_dir_fd=_root_fd(), follow_symlinks=True)
                        return stamp
                    except FileExistsError:
                        pass
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

    def _write_renamed(self, path: str, task_id: str, data: bytes) -> Stamp:
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

    def _fill(self, fd: int, data: bytes) -> Stamp:
        write_all(fd, data)
        if self.fsync:
            os.fsync(fd)
        return file_stamp(os.fstat(fd))

    def _temp_name(self, task_id: str) -> str:
        return temp_path(self._dir, task_id)
