"""Reading task files (fresh: every load stats the file) and listing them (the
index), with the read-ahead of a ListTasks page on reader threads."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from a2a_gateway.protocol.context import Caller
from a2a_gateway.protocol.proto_dict import remember_recent_json
from lf.a2a.v1 import a2a_pb2 as pb

from ..ids import valid_id
from ..secret_box import SecretBoxError
from ..task_index import RECONCILE_WAIT_ROWS, Parsed, unreadable_for_now
from ..task_states import ACTIVE
from ..task_store import Listing, TaskFilter, TaskRecord, TaskSummary, Window
from .folder import MALFORMED, Loaded, ReadBudget, Stamp, TaskFiles, file_stamp
from .task_file import decode_document, task_line

log = logging.getLogger(__name__)

_ENTRY_OVERHEAD = 300  # bytes a cached record costs beyond its serialized bytes

_READERS: list[ThreadPoolExecutor] = []
READ_THREADS = 8  # files read at once by a ListTasks page (see prefetch)
#: A file read ahead for a page is taken by that page's load without another stat
#: when the load comes within this long (it does, a few ms later).
READ_AHEAD_FRESH_S = 0.5


def _reader_pool() -> ThreadPoolExecutor:
    if not _READERS:
        _READERS.append(ThreadPoolExecutor(READ_THREADS, thread_name_prefix="a2a-task-read"))
    return _READERS[0]


class FileTaskReads(TaskFiles):
    """Tasks' loads (fresh: stat-validated cache), read-ahead of ListTasks pages, and
    listing from the index."""

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        loaded = self._read(task_id)
        if loaded is None or loaded.owner != owner:
            return None
        configs = [pb.TaskPushNotificationConfig.FromString(data) for data in loaded.push]
        versions = dict(loaded.push_versions)
        task = pb.Task.FromString(loaded.task_bytes)
        if loaded.task_json is not None:  # a GetTask's answer (codec.to_json)
            remember_recent_json(task_id, loaded.task_bytes, loaded.task_json)
        return TaskRecord(task, owner, configs, versions, retry_keys=list(loaded.retry_keys))

    def stored_bytes(self, owner: Caller, task_id: str) -> tuple[int, bytes] | None:
        # The file stat'ed as for load (an edit or a removal applies at once). Its
        # task's JSON, when the file holds it as an answer prints it, is the answer's
        # (the task's dict is not built and encoded again: proto_dict.recent_task_json).
        loaded = self._read(task_id)
        if loaded is None or loaded.owner != owner:
            return None
        if loaded.task_json is not None:
            remember_recent_json(task_id, loaded.task_bytes, loaded.task_json)
        return loaded.summary.state, loaded.task_bytes

    def stored_json(self, owner: Caller, task_id: str, read_once: bool) -> bytes | None:
        # Fresh as load: a record cached at the file's stamp gives the JSON it kept.
        # Else, read once (a retry answered by a fresh process), the index's row vouches
        # for a file with the stamp it was indexed at, whose task line is then the
        # answer, nothing decoded (not the task built and its bytes made and copied, ~24
        # of ~26 us for the bench's task, nor the document parsed and the task printed
        # again, docs/performance.md), nor kept: a task asked for again (GetTask's
        # polls) is loaded, and cached, instead.
        if self._cache.peek(task_id) is not None:
            loaded = self._read(task_id)
            if loaded is None or loaded.owner != owner or loaded.summary.state in ACTIVE:
                return None
            return loaded.task_json
        if not read_once:
            return None
        stamp = self._start().settled_file(owner, task_id)
        if stamp is None:
            return None
        raw = self._read_raw(f"{self._dir}/{task_id}.json")
        if raw is None or raw[0] != stamp or raw[1] is None:
            return None  # changed since it was indexed: read whole (and anew) by load
        return task_line(raw[1])  # (the row vouches for the line: no JSON parsed)

    def replay_check(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str, task_bytes: bytes
    ) -> Callable[[], bool] | None:
        # found_message and stored_bytes prepared once (engine/replay.py): the key made
        # and the record read now, with the file's stamp it was read at; each check
        # then looks the key up in the index's maps and stats the file, and holds while
        # the file has that stamp (the cache's own test: the same record, so the same
        # owner, bytes and state; an edit, a removal or a rewrite fails it, and the
        # engine's path answers and is kept anew).
        loaded = self._read(task_id)
        cached = self._cache.peek(task_id)
        if (
            loaded is None
            or cached is None
            or cached[1] is not loaded
            or loaded.owner != owner
            or loaded.summary.state in ACTIVE
            or (loaded.task_bytes is not task_bytes and loaded.task_bytes != task_bytes)
        ):
            return None
        stamp = cached[0]
        index = self.index
        key = index.retry_key(owner, message_id, fingerprint)
        path = f"{self._dir}/{task_id}.json"
        stat = os.stat

        def holds() -> bool:
            if not self._started or index.found_key(key) != task_id:
                return False
            try:
                st = stat(path)
            except OSError:
                return False
            return (st.st_mtime_ns, st.st_size, st.st_ino) == stamp  # (file_stamp)

        return holds

    def _read(self, task_id: str) -> Loaded | None:
        if not valid_id(task_id):
            return None
        read_at = self._read_ahead.pop(task_id, None)
        if read_at is not None and time.monotonic() - read_at < READ_AHEAD_FRESH_S:
            ahead = self._cache.get(task_id)
            if ahead is not None:
                return ahead[1] if isinstance(ahead[1], Loaded) else None
        path = f"{self._dir}/{task_id}.json"
        if self._cache.peek(task_id) is None:
            # Nothing cached to validate: the read's own fstat gives the stamp (a cold
            # read, e.g. a retry answered by a fresh process, stats the file once).
            return self._read_file(task_id, path)
        try:
            st = os.stat(path)
        except OSError:
            self._cache.pop(task_id)
            return None
        stamp = file_stamp(st)
        cached = self._cache.get(task_id)
        if cached is not None and cached[0] == stamp:
            value = cached[1]
            return value if isinstance(value, Loaded) else None
        return self._read_file(task_id, path)

    def _read_file(self, task_id: str, path: str) -> Loaded | None:
        parsed = self._parse_file(task_id, path)
        if parsed is None:
            self._cache.pop(task_id)
            return None
        return self._keep(task_id, path, *parsed)

    def _parse_file(
        self, task_id: str, path: str, budget: ReadBudget | None = None
    ) -> tuple[Stamp, Loaded | str] | None:
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
        return stamp, Loaded(
            decoded.owner,
            TaskSummary.of(decoded.task),
            decoded.task.SerializeToString(),
            tuple(c.SerializeToString() for c in self._open_configs(decoded.configs, path)),
            tuple(decoded.versions.items()),
            decoded.retry_keys,
            decoded.task_json,
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
            decoded = decode_document(data, task_id, check_line=True)
        except ValueError:
            return stamp, None
        summary = TaskSummary.of(decoded.task)
        return stamp, (decoded.owner, summary, decoded.retry_keys, decoded.answer)

    def _keep(self, task_id: str, path: str, stamp: Stamp, parsed: Loaded | str) -> Loaded | None:
        """Remember a parsed file in the cache; log a malformed one once per version
        of the file (while it is cached)."""
        if isinstance(parsed, str):
            previous = self._cache.peek(task_id)
            if previous is None or previous[0] != stamp:
                log.warning("task file is malformed (%s), read as no such task: %s", parsed, path)
            self._cache.put(task_id, (stamp, MALFORMED), _ENTRY_OVERHEAD)
            return None
        size = len(parsed.task_bytes) + sum(len(p) for p in parsed.push) + _ENTRY_OVERHEAD
        if parsed.task_json is not None:
            size += len(parsed.task_json)
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
        budget = ReadBudget(max_bytes)
        done: list[tuple[str, str, tuple[Stamp, Loaded | str] | None]] = []

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
                stamp, (file_owner, summary, _, answer) = parsed[0], parsed[1]
                index.put(file_owner, summary, stamp, answer)
