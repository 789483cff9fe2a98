"""The derived task index of one workspace: ``<workspace>/.a2a/index.sqlite3``.

Task files stay the source of truth; this index is what ListTasks filters and orders on,
so a page costs an indexed range query, not a pass over every task:

- ``tasks``: one row per readable task file: id, owner, context, state, status
  timestamp (ns), the file's (mtime, size, inode) stamp when it was indexed, and
  whether that file's task line is its task's JSON as an answer prints it (``answer``:
  every file this gateway writes; a file written by hand, when it reads so), which lets
  a settled task's file answer a retry with that line, nothing decoded (``settled_file``);
- ``counts``: how many tasks each owner has, in all and per state, kept by triggers,
  so ``totalSize`` is one lookup; with a context or ``statusTimestampAfter`` filter it
  is a count over that index range (the tasks of one context);
- ``retry``: the retry keys (owner, messageId and the message's fingerprint, see
  ``engine.retries`` -> task id), so a retried message is recognised across restarts.

It is the standard library's SQLite in WAL mode (``synchronous=NORMAL``): a process
killed with SIGKILL loses no committed transaction. Nothing blocks the event loop on
SQLite but point lookups of retry keys. Opening the database (which waits, up to the
busy timeout, while another process holds it locked) runs on the writer thread, first
in its queue, so the first request of a workspace never stalls the others; what needs
the database waits for it there (:meth:`TaskIndex.opened`; a retry-key lookup made
before answers from the keys queued so far), and a failed open is tried again by the
next batch or the next caller. A store's write queues its rows in the same
step as the file (lookups see them at once) and a writer thread, the only one that
writes, commits them as one transaction ``COMMIT_DELAY_S`` later, or as soon as a read
needs them; a commit costs ~250 us here, more than the rest of a blocking send. A
process killed within that window loses those rows, never a file: an index not closed
cleanly is reconciled at the next start, which also puts back the retry keys the task
files carry (``file_store``), and retry-key lookups wait for that pass
(``KEYS_RECOVERY_WAIT_S`` at most), so no answered message is taken as new. Page
queries and counts run on a reader thread with its own connection; reconciling,
rebuilding and retention scans read on a maintenance thread, and their changes go
through the writer with compare-and-set on the file stamp (a newer write always wins);
the writer also checkpoints the WAL. An owner's id is a hash of its name, so no write
waits to learn it.

Keeping it in step with the folder:

- at open, a missing, unreadable or foreign-version index is deleted and rebuilt in the
  background (the first pass of :meth:`reconcile` over an empty index); requests are
  served meanwhile from what is indexed so far; an index whose last process did not
  close it cleanly, or whose folder changed while the server was down, is reconciled;
  a close while a reconcile is owed (not started, cancelled, failed) leaves the index
  marked unclean, so the next start does it;
- :meth:`check_folder` is the cheap check each ListTasks makes: one ``stat`` of the
  folder, whose mtime moves when a file is added, removed or renamed in; the store
  remembers the mtime its own writes left, so a difference means a change behind the
  server's back (from the open on, also before the first ListTasks), and a reconcile
  starts; a close after one no ListTasks noticed leaves the index marked unclean;
- a periodic reconcile (``reconcile_interval_s``) also catches in-place edits.

Memory: nothing here holds an entry per stored task. SQLite's page cache is bounded per
connection (``CACHE_KIB``); a reconcile streams the folder in batches and keeps the ids
it has seen in a temporary table on disk.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import hashlib
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from a2a_gateway.local.atomic_files import is_stale_temp
from a2a_gateway.local.layout import RELATIVE
from a2a_gateway.protocol.context import Caller

from .byte_lru import ByteLRU
from .ids import valid_id
from .task_states import ACTIVE, TERMINAL
from .task_store import Listing, MessageKey, TaskFilter, TaskSummary, Window

log = logging.getLogger(__name__)

#: 2: retry keys carry the fingerprint (engine.retries); 3: hashed owner ids; 4: ``answer``;
#: 5: ``answer`` vouches for the file's task line as it stands (schema 4's for its dict)
SCHEMA_VERSION = 5
INDEX_NAME = RELATIVE.task_index.name
CACHE_KIB = 4096  # SQLite page cache per connection
BATCH = 500  # files per reconcile batch, rows per applied batch
COMMIT_DELAY_S = 0.01  # how long index writes may wait for their commit
CHECKPOINT_PAGES = 4096  # the writer checkpoints the WAL once it holds this many pages
WAL_KEEP_BYTES = 64 << 20  # a checkpointed WAL is cut back to this
#: In a folder of up to about this many files, a ListTasks that finds a reconcile
#: running (started by its own cheap check, the periodic one, or the one after an
#: unclean stop) waits for it (a few tens of ms); in a larger one, it answers from the
#: index as it is and the reconcile catches up in the background.
RECONCILE_WAIT_ROWS = 20_000
#: A retry-key lookup waits up to this long for the reconcile owed at open (after an
#: unclean stop, or a rebuild), which puts back the keys of the task files written
#: after the index's last commit; past it, lookups answer from what is indexed.
KEYS_RECOVERY_WAIT_S = 30.0
#: Retry keys found in the database are kept in memory, at most this many (and
#: :data:`FOUND_KEY_BYTES`), so a message retried again is answered without a
#: ``SELECT`` on the event loop (the side-by-side bench's gRPC sends all repeat one
#: message). Only keys the database holds now: every task row deleted (a removal, a
#: retention pass, a reconcile) empties them, as its keys leave the database with it.
FOUND_KEYS = 4096
FOUND_KEY_BYTES = 1 << 20
_FOUND_KEY_OVERHEAD = 200  # bytes an entry costs beyond its strings

_INT64_MAX = (1 << 63) - 1
Stamp = tuple[int, int, int]  # (mtime_ns, size, inode) of a task file
#: What a task file holds for the index: its stamp, then (owner, summary, retry keys),
#: or None when the file is malformed (it is not listed); None overall when it cannot
#: be read.
#: What a reconcile reads of one file: its stamp and, when it is a task's, the owner,
#: summary, retry keys and whether the file holds the task's JSON as an answer prints
#: it (the row's ``answer``); None when it cannot be read.
Parsed = tuple[Stamp, tuple[Caller, TaskSummary, tuple[MessageKey, ...], bool] | None] | None
ParseFn = Callable[[str, str], Parsed]

_T = TypeVar("_T")
_RetryKey = tuple[int, str, str]  # (owner id, messageId, fingerprint)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS owners(
  id INTEGER PRIMARY KEY, workspace TEXT NOT NULL, name TEXT NOT NULL,
  UNIQUE(workspace, name));
CREATE TABLE IF NOT EXISTS tasks(
  task_id TEXT PRIMARY KEY, owner INTEGER NOT NULL, context_id TEXT NOT NULL,
  state INTEGER NOT NULL, ts INTEGER NOT NULL,
  mtime INTEGER NOT NULL, size INTEGER NOT NULL, ino INTEGER NOT NULL,
  answer INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_by_owner ON tasks(owner, ts, task_id);
CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks(owner, state, ts, task_id);
CREATE INDEX IF NOT EXISTS tasks_by_context ON tasks(owner, context_id, ts, task_id, state);
-- scope: 0 owner, 1 owner+state (context counts are index range counts)
CREATE TABLE IF NOT EXISTS counts(
  owner INTEGER NOT NULL, scope INTEGER NOT NULL, state INTEGER NOT NULL,
  n INTEGER NOT NULL, PRIMARY KEY(owner, scope, state)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS retry(
  owner INTEGER NOT NULL, message_id TEXT NOT NULL, fingerprint TEXT NOT NULL,
  task_id TEXT NOT NULL, PRIMARY KEY(owner, message_id, fingerprint)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS retry_by_task ON retry(task_id);
CREATE TRIGGER IF NOT EXISTS tasks_insert AFTER INSERT ON tasks BEGIN
  INSERT INTO counts VALUES (new.owner, 0, 0, 1), (new.owner, 1, new.state, 1)
  ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS tasks_delete AFTER DELETE ON tasks BEGIN
  UPDATE counts SET n = n - 1
  WHERE owner = old.owner AND (scope = 0 OR (scope = 1 AND state = old.state));
  DELETE FROM retry WHERE task_id = old.task_id;
END;
CREATE TRIGGER IF NOT EXISTS tasks_update AFTER UPDATE OF owner, state ON tasks
WHEN old.owner != new.owner OR old.state != new.state
BEGIN
  UPDATE counts SET n = n - 1
  WHERE owner = old.owner AND (scope = 0 OR (scope = 1 AND state = old.state));
  INSERT INTO counts VALUES (new.owner, 0, 0, 1), (new.owner, 1, new.state, 1)
  ON CONFLICT DO UPDATE SET n = n + 1;
END;
"""

_UPSERT = (
    "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(task_id) DO UPDATE SET"
    " owner = excluded.owner, context_id = excluded.context_id, state = excluded.state,"
    " ts = excluded.ts, mtime = excluded.mtime, size = excluded.size, ino = excluded.ino,"
    " answer = excluded.answer"
)
# A retry key's task, with its task row as settled_file reads it (none: NULLs).
_FIND_KEY = (
    "SELECT r.task_id, t.owner, t.state, t.mtime, t.size, t.ino, t.answer FROM retry AS r"
    " LEFT JOIN tasks AS t ON t.task_id = r.task_id"
    " WHERE r.owner = ? AND r.message_id = ? AND r.fingerprint = ?"
)
_TASK_ROW = "SELECT owner, state, mtime, size, ino, answer FROM tasks WHERE task_id = ?"
_INSERT_NEW = "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(task_id) DO NOTHING"
_UPDATE_IF = (
    "UPDATE tasks SET owner = ?, context_id = ?, state = ?, ts = ?, mtime = ?, size = ?,"
    " ino = ?, answer = ? WHERE task_id = ? AND mtime = ? AND size = ? AND ino = ?"
)
_DELETE_IF = "DELETE FROM tasks WHERE task_id = ? AND mtime = ? AND size = ? AND ino = ?"
# A retry key read from a task file (a reconcile): the index's own keys win, and a key
# of a task whose row is gone (a newer removal won) is not brought back.
_RECOVER_KEY = (
    "INSERT OR IGNORE INTO retry SELECT ?, ?, ?, ?"
    " WHERE EXISTS (SELECT 1 FROM tasks WHERE task_id = ?)"
)


@dataclass(slots=True)
class _Change:
    """One row change found by a reconcile: ``row`` None deletes, ``expect`` None
    inserts only when no row exists (a newer write wins)."""

    task_id: str
    expect: Stamp | None
    row: tuple[Caller, TaskSummary, Stamp, bool] | None
    retry_keys: tuple[MessageKey, ...] = ()
    #: The file was empty: a new task file whose creation a killed process did not
    #: finish (``file_store.writes``), removed with its row if it is still empty.
    empty: bool = False


def _owner_hash(owner: Caller) -> int:
    """A signed 64-bit id for the owner (a collision needs ~4e9 owners to be likely)."""
    key = f"{owner.workspace}\x00{owner.name}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big", signed=True)


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # only the writer's connection checkpoints
    conn.execute(f"PRAGMA journal_size_limit={WAL_KEEP_BYTES}")
    conn.execute("PRAGMA temp_store=FILE")
    return conn


def _remove_index_files(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)


_OPEN: dict[str, TaskIndex] = {}  # one index per database file in a process


@dataclass(slots=True, frozen=True)
class _Opened:
    """What the open (on the writer thread) found: the connection, whether the index
    is being rebuilt, whether a reconcile is owed, the folder's mtime at open."""

    db: sqlite3.Connection
    rebuilding: bool
    wanted: bool
    folder_mtime: int | None


class _IndexCore(abc.ABC):
    """The index's database: its connection, the batched writes (event loop) and the
    reader threads; the parts below build on it."""

    @abc.abstractmethod
    def request_reconcile(self) -> asyncio.Task[None] | None:
        """(:class:`_FolderSync`) Start a reconcile; the task."""

    @abc.abstractmethod
    async def _every_interval(self) -> None:
        """(:class:`_FolderSync`) Reconcile every ``reconcile_interval_s``."""

    def __init__(
        self,
        path: Path,
        folder: Path,
        parse: ParseFn,
        *,
        reconcile_interval_s: float = 600.0,
    ) -> None:
        self.path = str(path)
        self._key = os.path.abspath(path)
        self.folder = str(folder)
        self.reconcile_interval_s = reconcile_interval_s
        self._parse = parse
        self._owners: dict[Caller, int] = {}
        # The last owner asked for and its id (by identity: a Caller's hash and equality
        # are Python code, and most sends come from one caller object), while it is in
        # ``_owners`` (its row queued).
        self._last_owner: Caller | None = None
        self._last_owner_id = 0
        # The last owner a lookup hashed without a row of its (:meth:`retry_key`).
        self._last_hashed: Caller | None = None
        self._last_hashed_id = 0
        self._pending: list[tuple[str, Any, bool]] = []  # writes not yet sent
        self._flush_timer: asyncio.TimerHandle | None = None
        self._inflight: Future[bool] | None = None  # the last batch sent to the writer
        self._pending_retry: dict[_RetryKey, str] = {}  # retry keys not yet committed
        # Keys a lookup found committed (see FOUND_KEYS); dropped with any task row.
        self._found_retry: ByteLRU[_RetryKey, str] = ByteLRU(FOUND_KEYS, FOUND_KEY_BYTES)
        self._deletes_unsent = False  # a queued write deletes task rows (and their keys)
        # The task row the last lookup's SELECT found with its key (task id, then owner,
        # state, mtime, size, ino, answer), for the settled_file that follows it in the
        # same step (a retry answered from its file); taken once. (A row older than the
        # file is harmless: the file's stamp must still be the row's.)
        self._found_row: tuple[str, tuple[Any, ...]] | None = None
        # (key, task id) of each retry key written since the last batch went.
        self._unsent_retry: list[tuple[_RetryKey, str]] = []
        self._writer: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._reader: ThreadPoolExecutor | None = None
        self._worker: ThreadPoolExecutor | None = None
        self._reconcile: asyncio.Task[None] | None = None
        self._periodic: asyncio.Task[None] | None = None
        self._reconcile_again = False
        self._known_until_ns: int | None = None  # folder changes up to here are known
        self._closed = False
        self._users = 0
        self.rebuilding = False  # True until the first full pass over a new index ends
        self.rebuilds = 0  # full passes that (re)built the index, since this process opened it
        self._wanted_at_start = False
        # A reconcile is owed (wanted at open, requested, or a batch failed) and no
        # pass has done it since: the close then leaves the index marked unclean, so
        # the next start reconciles (a close never forgets one).
        self._unreconciled = False
        # The index may lack retry keys that task files hold (it was not closed
        # cleanly, or is rebuilt): lookups wait for the first reconcile pass.
        self._keys_behind = False
        # The event loop's connection (retry-key lookups), once the open is taken in.
        self._db: sqlite3.Connection | None = None
        self._lookup: sqlite3.Cursor | None = None  # its cursor, reused by each lookup
        # Lookups since the last batch went to the writer, and whether the loop's
        # connection holds a read transaction for them (see find_message).
        self._lookups = 0
        self._snapshot = False
        self._opened_here: _Opened | None = None  # (writer thread) the open that worked
        self._opening: Future[_Opened] = self._pool("writer").submit(self._open_here)

    # --- opening ---------------------------------------------------------------------

    def _open_here(self) -> _Opened:
        """(writer thread) The open, done once; one that failed (raised) is tried again
        by the next call."""
        if self._opened_here is None:
            self._opened_here = self._open()
        return self._opened_here

    def _open(self) -> _Opened:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        existed = os.path.exists(self.path)
        if existed:
            try:
                conn = _connect(self.path)
                meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
                if meta.get("version") != SCHEMA_VERSION:
                    raise sqlite3.DatabaseError(f"schema version {meta.get('version')!r}")
                rebuilding = meta.get("complete") != 1
                folder_mtime = self._folder_mtime()
                wanted = rebuilding or meta.get("clean") != 1 or meta.get("mtime") != folder_mtime
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('clean', 0)")
                return _Opened(conn, rebuilding, wanted, folder_mtime)
            except sqlite3.DatabaseError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise  # in use by another process: not damaged, not ours to rebuild
                log.warning("task index %s is unusable (%s): rebuilding it", self.path, exc)
                with contextlib.suppress(Exception):
                    conn.close()
                _remove_index_files(self.path)
        folder_mtime = self._folder_mtime()
        conn = _connect(self.path)
        conn.executescript("BEGIN;" + _SCHEMA + "COMMIT;")
        conn.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [("version", SCHEMA_VERSION), ("complete", 0), ("clean", 0)],
        )
        return _Opened(conn, True, True, folder_mtime)

    async def opened(self) -> None:
        """Until the database is open. The open runs on the writer thread, never on
        the event loop: it may wait there, up to the busy timeout, for another process
        that holds the database locked. Raises what the open raised (the next call
        tries again)."""
        if self._db is not None:
            return
        opening = self._opening
        if opening.done() and (opening.cancelled() or opening.exception() is not None):
            if self._closed:
                raise sqlite3.ProgrammingError(f"task index {self.path} is closed")
            opening = self._opening = self._pool("writer").submit(self._open_here)
        # Shielded: a cancelled waiter must not cancel the open itself.
        found = await asyncio.shield(asyncio.wrap_future(opening))
        if self._db is None:
            self._take_opened(found)

    def _take_opened(self, found: _Opened) -> None:
        """(event loop) Take in what the open found."""
        self._db = found.db
        self._lookup = found.db.cursor()
        self.rebuilding = found.rebuilding
        self._wanted_at_start = found.wanted
        # The folder as it was at open is indexed (or about to be): a change from there
        # on is one behind the server's back, also before the first ListTasks.
        if found.folder_mtime is not None:
            self._known_until_ns = max(self._known_until_ns or 0, found.folder_mtime)
        if found.wanted:
            self._unreconciled = True
            self._keys_behind = True
            if self._periodic is not None:  # started: the reconcile starts now
                self.request_reconcile()

    def _folder_mtime(self) -> int | None:
        try:
            return os.stat(self.folder).st_mtime_ns
        except OSError:
            return None

    def start(self) -> None:
        """Start the background work (call from the event loop; idempotent): the
        rebuild or reconcile the index needs at open, then the periodic reconcile."""
        if self._periodic is not None or self._closed:
            return
        loop = asyncio.get_running_loop()
        self._periodic = loop.create_task(self._every_interval(), name="a2a-index-reconcile")
        if self._db is not None and self._wanted_at_start:
            self.request_reconcile()  # else once the open is taken in (_take_opened)

    # --- writing (event loop) --------------------------------------------------------

    def _write(self, sql: str, params: Sequence[Any], *, many: bool = False) -> None:
        """Queue a write for the writer thread; the batch goes ``COMMIT_DELAY_S``
        later, or before any read that must see it (:meth:`flushed`). Without a
        running loop (a synchronous caller) it is written at once."""
        self._pending.append((sql, params, many))
        if self._flush_timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._pool("writer").submit(self._run_batch, self._take_batch()).result()
            return
        self._flush_timer = loop.call_later(COMMIT_DELAY_S, self.commit)

    def _take_batch(self) -> list[tuple[str, Any, bool]]:
        self._end_snapshot()  # no batch commits while the lookups' snapshot is held
        batch, self._pending = self._pending, []
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        return batch

    def _end_snapshot(self) -> None:
        """End the read transaction the lookups hold, if any (event loop)."""
        self._lookups = 0
        if self._snapshot:
            self._snapshot = False
            if self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("COMMIT")

    def commit(self) -> None:
        """Hand the queued writes to the writer thread, as one transaction."""
        if not self._pending:
            return
        batch = self._take_batch()
        retry_keys, self._unsent_retry = self._unsent_retry, []
        deletes, self._deletes_unsent = self._deletes_unsent, False
        future = self._pool("writer").submit(self._run_batch, batch)
        self._inflight = future
        loop = asyncio.get_running_loop()

        def done(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._batch_done, future, retry_keys, deletes)

        future.add_done_callback(done)

    def _rows_deleted(self) -> None:
        """A task row's delete is queued: the keys found so far may leave with it. They
        are dropped now and again once it is committed (a lookup in between reads the
        database as it still is)."""
        self._found_retry.clear()
        self._deletes_unsent = True

    def _batch_done(
        self,
        future: Future[bool],
        retry_keys: list[tuple[_RetryKey, str]],
        deletes: bool = False,
    ) -> None:
        pending = self._pending_retry
        for key, task_id in retry_keys:
            # Only while it names this batch's task: a key written again since (a later
            # batch) stays pending until that one is in, or a lookup meanwhile would
            # read (and keep) the task this batch committed.
            if pending.get(key) == task_id:
                del pending[key]
        if deletes:
            self._found_retry.clear()
        if future.cancelled() or future.exception() is not None or not future.result():
            # The owners rows it carried are not in: the next write naming each owner
            # queues its row again (retention finds owners there).
            self._owners.clear()
            self._last_owner = None
            self.request_reconcile()
            return

    def _run_batch(self, batch: list[tuple[str, Any, bool]]) -> bool:
        """(writer thread) One transaction; False (logged) when it failed."""
        try:
            self._open_here()  # queued before any batch; tried again if it failed
        except Exception as exc:
            log.warning("task index %s could not be opened (%s); not written", self.path, exc)
            return False
        db = self._thread_db()
        if not getattr(self._local, "writes", False):
            # The WAL is checkpointed by the one connection that writes, right after a
            # commit once it holds CHECKPOINT_PAGES (SQLite's automatic checkpoint),
            # so no append can overtake it and the next write starts the WAL over.
            # On another thread a checkpoint never caught up with a busy writer: the
            # WAL reached 2-9 GB while a million files were indexed.
            db.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
            self._local.writes = True
        try:
            db.execute("BEGIN")
            cursor = db.cursor()  # one for the batch: not one made per row
            for sql, params, many in batch:
                if many:
                    cursor.executemany(sql, params)
                else:
                    cursor.execute(sql, params)
            db.execute("COMMIT")
        except sqlite3.Error:
            log.exception("task index write failed; the next reconcile repairs it")
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            return False
        return True

    async def flushed(self) -> None:
        """Until every write queued so far is committed."""
        self.commit()
        inflight = self._inflight
        if inflight is not None and not inflight.done():
            # Shielded: a cancelled waiter must not cancel the batch itself.
            await asyncio.shield(asyncio.wrap_future(inflight))

    def owner_id(self, owner: Caller) -> int:
        """The owner's id in this index: a 64-bit hash of (workspace, name), so that
        neither a write nor a lookup waits on the database for it; its ``owners`` row
        is queued with the first write that names it."""
        if owner is self._last_owner:
            return self._last_owner_id
        known = self._owners.get(owner)
        if known is None:
            known = self._owners[owner] = _owner_hash(owner)
            self._write(
                "INSERT OR IGNORE INTO owners(id, workspace, name) VALUES (?, ?, ?)",
                (known, owner.workspace, owner.name),
            )
        self._last_owner, self._last_owner_id = owner, known
        return known

    def put(self, owner: Caller, summary: TaskSummary, stamp: Stamp, answer: bool) -> None:
        """The row of a task file this process just wrote or read (replaces any);
        ``answer``: the file holds the task's JSON as an answer prints it."""
        self._write(
            _UPSERT,
            (
                summary.task_id,
                self.owner_id(owner),
                summary.context_id,
                summary.state,
                summary.timestamp_ns,
                *stamp,
                answer,
            ),
        )

    def remove(self, task_id: str) -> None:
        """Forget a task (its file is gone)."""
        self._rows_deleted()
        self._write("DELETE FROM tasks WHERE task_id = ?", (task_id,))

    def wrote_folder(self) -> None:
        """This process changed the folder (a file created, replaced or removed): a
        folder mtime up to now is ours, not a change behind our back. (The kernel
        stamps the folder with its coarse clock, never ahead of this reading.)"""
        self._known_until_ns = time.time_ns()

    # --- reading (reader thread) -----------------------------------------------------

    def _pool(self, which: str) -> ThreadPoolExecutor:
        if which == "writer":
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="a2a-index-write")
            return self._writer
        if which == "reader":
            if self._reader is None:
                self._reader = ThreadPoolExecutor(1, thread_name_prefix="a2a-index-read")
            return self._reader
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="a2a-index-work")
        return self._worker

    def _thread_db(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _connect(self.path)
        return conn

    async def _read(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        await self.opened()
        await self.flushed()  # the reader's connection sees only committed rows
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool("reader"), lambda: fn(self._thread_db()))

    async def check_readable(self) -> None:
        """Raise unless the index opens and answers a query on its reader thread (the
        one ListTasks uses), behind the writes already queued."""
        await self._read(lambda db: db.execute("SELECT 1 FROM counts LIMIT 1").fetchall())

    async def in_worker(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the maintenance thread (file work that belongs with the index)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool("worker"), fn)

    def delete_if(self, task_id: str, stamp: Stamp) -> None:
        """Forget a task unless its file was written since ``stamp`` was indexed."""
        self._rows_deleted()
        self._write(_DELETE_IF, (task_id, *stamp))


class _IndexQueries(_IndexCore):
    """ListTasks, restart recovery, retention and the gauges (reader thread)."""

    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing:
        """In one snapshot: up to ``limit`` of the owner's tasks matching ``flt`` after
        ``cursor`` (a (timestamp, id) position), newest first (timestamp, then id,
        descending); how many match in all; and the rows of ``task_ids``."""
        cursor, limit, task_ids = window
        owner_id = self.owner_id(owner)
        page_sql = ["SELECT task_id, context_id, state, ts FROM tasks WHERE owner = ?"]
        page_params: list[Any] = [owner_id]
        _where(flt, page_sql, page_params)
        if cursor is not None:
            page_sql.append("AND (ts, task_id) < (?, ?)")
            page_params.extend(cursor)
        page_sql.append("ORDER BY ts DESC, task_id DESC LIMIT ?")
        page_params.append(limit)
        if not flt.context_id and flt.after_ns is None:
            count_sql = ["SELECT n FROM counts WHERE owner = ? AND scope = ? AND state = ?"]
            count_params: list[Any] = [owner_id, 1 if flt.state else 0, flt.state]
        else:  # a range of an index: the tasks of one context, or the recent ones
            count_sql = ["SELECT COUNT(*) FROM tasks WHERE owner = ?"]
            count_params = [owner_id]
            _where(flt, count_sql, count_params)
        ids = list(task_ids)

        def run(db: sqlite3.Connection) -> tuple[list[Any], int, list[Any]]:
            db.execute("BEGIN")
            try:
                rows = db.execute(" ".join(page_sql), page_params).fetchall() if limit else []
                found = db.execute(" ".join(count_sql), count_params).fetchone()
                named: list[Any] = []
                for start in range(0, len(ids), BATCH):
                    chunk = ids[start : start + BATCH]
                    marks = ",".join("?" * len(chunk))
                    named += db.execute(
                        "SELECT task_id, context_id, state, ts FROM tasks"
                        f" WHERE owner = ? AND task_id IN ({marks})",
                        [owner_id, *chunk],
                    ).fetchall()
            finally:
                db.execute("COMMIT")
            return rows, 0 if found is None else int(found[0]), named

        rows, total, named = await self._read(run)
        return (
            [TaskSummary(r[0], r[1], r[2], r[3]) for r in rows],
            total,
            [TaskSummary(r[0], r[1], r[2], r[3]) for r in named],
        )

    async def active_ids(self, owner: Caller) -> list[str]:
        """The owner's tasks indexed as submitted or working."""
        owner_id = self.owner_id(owner)
        states = sorted(ACTIVE)
        rows = await self._read(
            lambda db: db.execute(
                "SELECT task_id FROM tasks WHERE owner = ? AND state IN (?, ?)",
                (owner_id, *states),
            ).fetchall()
        )
        return [str(r[0]) for r in rows]

    async def expired(self, cutoff_ns: int, limit: int) -> list[tuple[str, Stamp]]:
        """Up to ``limit`` settled (terminal) tasks whose status is older than the
        cutoff, oldest first, with their indexed stamps."""

        def run(db: sqlite3.Connection) -> list[tuple[str, Stamp]]:
            found: list[tuple[str, Stamp]] = []
            owners = [r[0] for r in db.execute("SELECT id FROM owners")]
            for owner_id in owners:
                for state in sorted(TERMINAL):
                    rows = db.execute(
                        "SELECT task_id, mtime, size, ino FROM tasks"
                        " WHERE owner = ? AND state = ? AND ts < ? ORDER BY ts LIMIT ?",
                        (owner_id, state, cutoff_ns, limit - len(found)),
                    ).fetchall()
                    found += [(r[0], (r[1], r[2], r[3])) for r in rows]
                    if len(found) >= limit:
                        return found
            return found

        await self.opened()
        await self.flushed()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool("worker"), lambda: run(self._thread_db()))

    async def count_by_state(self) -> dict[int, int]:
        """Indexed tasks per state, all owners: the sums of the per-owner counts the
        triggers keep (a row per owner and state, never a pass over the tasks), read on
        the maintenance thread so that a scrape never waits behind a listing."""

        def run(db: sqlite3.Connection) -> dict[int, int]:
            rows = db.execute(
                "SELECT state, SUM(n) FROM counts WHERE scope = 1 GROUP BY state"
            ).fetchall()
            return {int(state): int(n) for state, n in rows}

        await self.opened()
        await self.flushed()
        return await self.in_worker(lambda: run(self._thread_db()))


class _IndexRetryKeys(_IndexCore):
    """The messageId retry keys (event loop; point lookups)."""

    # --- retry keys (event loop; point lookups) --------------------------------------

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        key = (self.owner_id(owner), message_id, fingerprint)
        self._pending_retry[key] = task_id  # seen by lookups until committed
        self._found_retry.pop(key)  # (INSERT OR REPLACE) the next lookup reads it anew
        self._unsent_retry.append((key, task_id))
        self._write("INSERT OR REPLACE INTO retry VALUES (?, ?, ?, ?)", (*key, task_id))

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return self._find_key(self.retry_key(owner, message_id, fingerprint))

    def _find_key(self, key: _RetryKey) -> str | None:
        self._found_row = None  # (only this lookup's SELECT may leave one)
        pending = self._pending_retry.get(key)
        if pending is not None or self._db is None:
            return pending  # not open yet: :meth:`lookup_message` waits for the open
        known = self._found_retry.get(key)
        if known is not None:
            return known
        cursor = self._point_cursor()
        try:
            found = cursor.execute(_FIND_KEY, key).fetchone()
        except sqlite3.Error:
            log.exception("task index lookup failed; answered as no retry")
            return None
        if found is None:
            return None
        task_id = str(found[0])
        self._found_row = (task_id, found[1:])
        size = len(key[1]) + len(key[2]) + len(task_id) + _FOUND_KEY_OVERHEAD
        self._found_retry.put(key, task_id, size)
        return task_id

    def _point_cursor(self) -> sqlite3.Cursor:
        """(the index open) The event loop's cursor for a point lookup."""
        db, cursor = self._db, self._lookup
        assert db is not None and cursor is not None  # (set with _db)
        if not self._snapshot:
            self._lookups += 1
            inflight = self._inflight
            if self._lookups > 1 and (inflight is None or inflight.done()):
                # A second lookup before the next batch goes to the writer: the next
                # ones read in one read transaction (a point SELECT then skips the
                # WAL's read lock and header, 4.4 -> 1.8 us here). No batch is in
                # flight, and none is handed over before it ends (_take_batch): it
                # sees every committed row, and the writer's checkpoint after each
                # commit never waits on it (the WAL still restarts).
                with contextlib.suppress(sqlite3.Error):
                    db.execute("BEGIN")
                    self._snapshot = True
        return cursor

    def settled_file(self, owner: Caller, task_id: str) -> Stamp | None:
        """The stamp its file had when indexed, for the owner's settled task (a state
        not in ACTIVE) whose file holds its JSON as an answer prints it (``answer``);
        None otherwise: not open yet, no such row (or not committed yet), another
        owner's, active, or a file in another shape. A file with this stamp now is the
        one that row describes (the record cache trusts the same stamp)."""
        if self._db is None:
            return None
        found, self._found_row = self._found_row, None
        if found is not None and found[0] == task_id:
            row = found[1]  # (the retry's lookup read it: no second SELECT)
        else:
            cursor = self._point_cursor()
            try:
                row = cursor.execute(_TASK_ROW, (task_id,)).fetchone()
            except sqlite3.Error:
                log.exception("task index lookup failed; the task file is read whole")
                return None
        if row is None or not row[5] or row[1] in ACTIVE or row[0] != self._lookup_owner_id(owner):
            return None
        return (row[2], row[3], row[4])

    def found_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        """What :meth:`lookup_message` answers, when it would answer without waiting
        (open, no keys owed by a reconcile); None otherwise (or no task has the key)."""
        return self.found_key(self.retry_key(owner, message_id, fingerprint))

    def retry_key(self, owner: Caller, message_id: str, fingerprint: str) -> _RetryKey:
        """The key lookups take (the owner's id without queuing its row: a hash of the
        owner, the same in every index)."""
        return (self._lookup_owner_id(owner), message_id, fingerprint)

    def _lookup_owner_id(self, owner: Caller) -> int:
        """The owner's id, its row not queued (a hash of the owner, the same in every
        index)."""
        if owner is self._last_owner:
            return self._last_owner_id
        if owner is self._last_hashed:  # a process that only looks up (answers retries)
            return self._last_hashed_id
        owner_id = self._owners.get(owner)
        if owner_id is None:
            owner_id = _owner_hash(owner)
            self._last_hashed, self._last_hashed_id = owner, owner_id
        return owner_id

    def found_key(self, key: _RetryKey) -> str | None:
        """:meth:`found_message` of a key made by :meth:`retry_key` (the memo's check
        makes it once per kept answer: no owner hashed on each call)."""
        if self._db is None or self._keys_behind:
            return None
        return self._find_key(key)

    async def lookup_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        """:meth:`find_message` once the index is open (an open that fails is logged
        and the lookup answered from the keys queued so far)."""
        if self._db is not None and not self._keys_behind:
            return self.find_message(owner, message_id, fingerprint)  # the common case
        try:
            await self.opened()
        except Exception as exc:
            log.warning("task index %s could not be opened (%s)", self.path, exc)
        else:
            if self._keys_behind:
                await self._keys_recovered()
        return self.find_message(owner, message_id, fingerprint)

    async def _keys_recovered(self) -> None:
        """Until the reconcile owed at open has passed over the folder, putting back
        the retry keys of task files written after the index's last commit (a process
        killed within ``COMMIT_DELAY_S`` of its last answers), at most
        :data:`KEYS_RECOVERY_WAIT_S`."""
        running = self._reconcile
        if running is None or running.done():
            running = self.request_reconcile()
        if running is None:
            return
        try:
            async with asyncio.timeout(KEYS_RECOVERY_WAIT_S):
                await asyncio.shield(running)
        except TimeoutError:
            if self._keys_behind:
                self._keys_behind = False
                log.warning(
                    "task index %s: its reconcile takes over %gs; messageId retries are"
                    " looked up in the keys indexed so far until it ends",
                    self.path,
                    KEYS_RECOVERY_WAIT_S,
                )


class _FolderSync(_IndexCore):
    """Keeping up with the tasks folder: changes made behind the index's back."""

    # --- keeping up with the folder --------------------------------------------------

    def check_folder(self) -> bool:
        """The cheap check of every ListTasks (one ``stat``): True, and a reconcile
        started, when the folder changed after the index was opened, this process's
        last write to it or the last reconcile. A change within a clock tick of one of
        our writes can pass unseen; the periodic reconcile catches it."""
        mtime = self._folder_mtime()
        if mtime is None:
            return False
        if self._known_until_ns is None:
            self._known_until_ns = mtime
            return False
        if mtime <= self._known_until_ns:
            return False
        self._known_until_ns = max(mtime, time.time_ns())
        self.request_reconcile()
        return True

    def request_reconcile(self) -> asyncio.Task[None] | None:
        """Start a reconcile (or have the running one run again); the task."""
        self._unreconciled = True
        if self._closed:
            return None
        running = self._reconcile
        if running is not None and not running.done():
            self._reconcile_again = True
            return running
        self._reconcile = asyncio.get_running_loop().create_task(
            self._reconcile_loop(), name="a2a-index-reconcile-pass"
        )
        return self._reconcile

    @property
    def reconciling(self) -> bool:
        """Whether a reconcile (or rebuild) is running."""
        return self._reconcile is not None and not self._reconcile.done()

    async def wait_reconciled(self) -> None:
        """Until no reconcile (or rebuild) is running."""
        while (running := self._reconcile) is not None and not running.done():
            await asyncio.shield(running)

    async def _every_interval(self) -> None:
        try:
            await self.opened()  # then a reconcile owed at open starts (_take_opened)
        except Exception as exc:
            log.warning("task index %s could not be opened (%s); tried again", self.path, exc)
        while True:
            await asyncio.sleep(self.reconcile_interval_s)
            task = self.request_reconcile()
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(task)

    async def _reconcile_loop(self) -> None:
        while True:
            self._reconcile_again = False
            self._unreconciled = False  # a request from here on sets it again
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                self._unreconciled = True
                raise
            except Exception:
                self._unreconciled = True
                self._keys_behind = False  # logged: lookups answer from what is indexed
                log.exception("task index reconcile failed")
                return
            self._keys_behind = False
            if not self._reconcile_again:
                return

    async def reconcile(self) -> None:
        """One pass over the folder: new, changed and malformed files, and rows whose
        file is gone. Reading runs on the maintenance thread; changes are applied here,
        one batch per turn of the loop."""
        loop = asyncio.get_running_loop()
        pool = self._pool("worker")
        await self.opened()
        started_ns = time.time_ns()
        await self.flushed()
        # Made on its thread too: its connection, temporary table and folder handle.
        scan = await loop.run_in_executor(pool, _Scan, self.path, self.folder, self._parse)
        try:
            for step in (scan.next_batch, scan.gone):
                while (changes := await loop.run_in_executor(pool, step)) is not None:
                    self._apply(changes)
                    await self.flushed()  # the next batch compares with these rows
        finally:
            pool.submit(scan.close)  # after its current step, on its thread
        if self.rebuilding:
            self.rebuilding = False
            self.rebuilds += 1
            self._write("INSERT OR REPLACE INTO meta VALUES ('complete', 1)", ())
            log.info("task index %s rebuilt", self.path)
        self._known_until_ns = max(self._known_until_ns or 0, started_ns)
        self.commit()

    def _apply(self, changes: list[_Change]) -> None:
        inserts: list[tuple[Any, ...]] = []
        keys: list[tuple[Any, ...]] = []
        for change in changes:
            expect, row = change.expect, change.row
            if change.empty:
                if self._remove_empty(change.task_id) and expect is not None:
                    self._rows_deleted()
                    self._write(_DELETE_IF, (change.task_id, *expect))
                continue
            if row is None:
                if expect is not None:
                    self._rows_deleted()
                    self._write(_DELETE_IF, (change.task_id, *expect))
                continue
            owner, summary, stamp, answer = row
            values = (
                self.owner_id(owner),
                summary.context_id,
                summary.state,
                summary.timestamp_ns,
                *stamp,
                answer,
            )
            if expect is None:
                inserts.append((change.task_id, *values))
            else:
                self._write(_UPDATE_IF, (*values, change.task_id, *expect))
            keys += [(values[0], *key, change.task_id, change.task_id) for key in change.retry_keys]
        if inserts:
            self._write(_INSERT_NEW, inserts, many=True)
        if keys:
            self._write(_RECOVER_KEY, keys, many=True)
        self.commit()

    def _remove_empty(self, task_id: str) -> bool:
        """Remove a task file that is (still) empty; whether it was. On the event loop,
        where the store writes without fsync: from a new file's creation to its write
        nothing else runs there, so an empty file here is never one half made."""
        path = f"{self.folder}/{task_id}.json"
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size != 0:
                return False
            os.unlink(path)
        except OSError:
            return False
        self.wrote_folder()
        log.info("removed the empty task file %s (a write a stopped process left)", path)
        return True


class TaskIndex(_IndexQueries, _IndexRetryKeys, _FolderSync):
    """The index of one tasks folder (see the module docstring).

    ``parse(task_id, path)`` reads one task file for a reconcile (called on the
    maintenance thread; it must not touch the event loop's state). Open it with
    :meth:`shared`: stores of one workspace in one process share it (two connections
    writing one database from one event loop would wait for each other's commits).
    """

    @classmethod
    def shared(
        cls, path: Path, folder: Path, parse: ParseFn, *, reconcile_interval_s: float = 600.0
    ) -> TaskIndex:
        index = _OPEN.get(os.path.abspath(path))
        if index is None or index._closed:
            index = cls(path, folder, parse, reconcile_interval_s=reconcile_interval_s)
            _OPEN[index._key] = index
        index._users += 1
        return index

    # --- closing ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop the background work and mark the index cleanly closed (when its last
        user closes it)."""
        self._users -= 1
        if self._closed or self._users > 0:
            return
        self._closed = True
        if _OPEN.get(self._key) is self:
            del _OPEN[self._key]
        for task in (self._periodic, self._reconcile):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.flushed()
        loop = asyncio.get_running_loop()
        for pool in (self._reader, self._worker):
            if pool is not None:
                await loop.run_in_executor(None, pool.shutdown)
        writer = self._pool("writer")
        # Everything queued for the writer has run, the opens too: take in what one
        # that worked found (a reconcile it found owed is remembered below).
        found = await loop.run_in_executor(writer, lambda: self._opened_here)
        if found is not None and self._db is None:
            self._take_opened(found)
        self._end_snapshot()
        db = self._db
        if db is not None:
            mtime = self._folder_mtime()
            # A folder changed behind our back that no ListTasks noticed: not indexed.
            unseen = mtime is not None and (
                self._known_until_ns is None or mtime > self._known_until_ns
            )
            clean = 0 if self.rebuilding or self._unreconciled or unseen else 1

            def mark() -> None:  # on the writer thread: it may wait for a lock
                with contextlib.suppress(sqlite3.Error):
                    db.executemany(
                        "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                        [("clean", clean), ("mtime", mtime)],
                    )
                db.close()

            await loop.run_in_executor(writer, mark)
        # Never opened: this process wrote nothing into it, nothing to mark.
        await loop.run_in_executor(None, writer.shutdown)


def unreadable_for_now(path: str) -> bool:
    """Whether a task file the parse could not open or read (its None) is still there
    as a regular file: a passing failure (the process at its file limit, EMFILE; no
    memory), not a removal. Its row, and with it the task's retry keys, stays."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _where(flt: TaskFilter, sql: list[str], params: list[Any]) -> None:
    if flt.context_id:
        sql.append("AND context_id = ?")
        params.append(flt.context_id)
    if flt.state:
        sql.append("AND state = ?")
        params.append(flt.state)
    if flt.after_ns is not None:
        sql.append("AND ts >= ?")
        params.append(max(min(flt.after_ns, _INT64_MAX), -_INT64_MAX))  # SQLite's range


class _Scan:
    """One reconcile pass, run on the maintenance thread (one method call at a time)."""

    def __init__(self, path: str, folder: str, parse: ParseFn) -> None:
        # First: the finalizer reads it, also that of a scan whose connection failed.
        self.entries: Any = None
        self.path = path
        self.folder = folder
        self.parse = parse
        self.db = _connect(path)
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS seen(task_id TEXT PRIMARY KEY)")
        self.db.execute("DELETE FROM temp.seen")
        self.last_gone: str | None = ""
        with contextlib.suppress(OSError):  # (no folder: nothing to list)
            self.entries = os.scandir(folder)

    def next_batch(self) -> list[_Change] | None:
        """The changes among the next ``BATCH`` files of the folder; None at the end."""
        if self.entries is None:
            return None
        batch: list[tuple[str, str, Stamp | None, bool]] = []
        for entry in self.entries:
            name = entry.name
            if is_stale_temp(name):  # left by a killed writer
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                continue
            if not name.endswith(".json") or name.startswith("."):
                continue
            task_id = name[:-5]
            if not valid_id(task_id):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                stamp: Stamp | None = (st.st_mtime_ns, st.st_size, st.st_ino)
                empty = st.st_size == 0 and stat.S_ISREG(st.st_mode)
            except OSError:
                stamp, empty = None, False
            batch.append((task_id, entry.path, stamp, empty))
            if len(batch) >= BATCH:
                break
        if not batch:
            self.entries.close()
            self.entries = None
            return None
        ids = [b[0] for b in batch]
        marks = ",".join("?" * len(ids))
        db = self.db
        db.execute("BEGIN")
        db.executemany("INSERT OR IGNORE INTO temp.seen VALUES (?)", [(i,) for i in ids])
        db.execute("COMMIT")
        known: dict[str, Stamp] = {
            r[0]: (r[1], r[2], r[3])
            for r in db.execute(
                f"SELECT task_id, mtime, size, ino FROM tasks WHERE task_id IN ({marks})", ids
            )
        }
        changes: list[_Change] = []
        for task_id, path, stamp, empty in batch:
            indexed = known.get(task_id)
            if empty:  # never a task: removed on the event loop (TaskIndex._apply)
                changes.append(_Change(task_id, indexed, None, empty=True))
                continue
            if stamp is not None and indexed == stamp:
                continue
            parsed = self.parse(task_id, path)
            if parsed is None and unreadable_for_now(path):
                continue  # the next pass reads it
            if parsed is None or parsed[1] is None:
                if indexed is not None:
                    changes.append(_Change(task_id, indexed, None))
                continue
            file_stamp, (owner, summary, keys, answer) = parsed[0], parsed[1]
            changes.append(_Change(task_id, indexed, (owner, summary, file_stamp, answer), keys))
        return changes

    def gone(self) -> list[_Change] | None:
        """The next batch of rows whose file no longer exists (checked again, one
        ``stat`` each); None after the last row."""
        if self.last_gone is None:
            return None
        rows = self.db.execute(
            "SELECT task_id, mtime, size, ino FROM main.tasks WHERE task_id > ?"
            " AND task_id NOT IN (SELECT task_id FROM temp.seen) ORDER BY task_id LIMIT ?",
            (self.last_gone, BATCH),
        ).fetchall()
        if not rows:
            self.last_gone = None
            return None
        self.last_gone = rows[-1][0]
        return [
            _Change(task_id, (mtime, size, ino), None)
            for task_id, mtime, size, ino in rows
            if not os.path.lexists(f"{self.folder}/{task_id}.json")
        ]

    def __del__(self) -> None:
        if self.entries is not None:  # a scan abandoned with its loop
            self.entries.close()

    def close(self) -> None:
        if self.entries is not None:
            self.entries.close()
            self.entries = None
        with contextlib.suppress(sqlite3.Error):
            self.db.execute("DROP TABLE IF EXISTS temp.seen")
        self.db.close()
