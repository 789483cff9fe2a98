"""The PostgreSQL store's connection: the pool, migrations, LISTEN, the database's
clock and the sealing of push configs (see the package docstring)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from ..byte_lru import ByteLRU
from ..events import Event
from ..secret_box import SecretBox, SecretBoxError
from ..store_outage import OutageLog, StoreOutageError
from ..task_states import ACTIVE, INTERRUPTED, TERMINAL
from ..task_store import (
    DEFAULT_RETRY_BYTES,
    DEFAULT_RETRY_KEYS,
    TaskFilter,
    TaskStore,
)
from .db_clock import DatabaseClock, clamp
from .errors import DB_ERRORS
from .group_commit import GroupCommit
from .kept import KeptConnections

log = logging.getLogger(__package__)  # one logger for the package, named as before

SCHEMA_VERSION = 9  # 2: leases; 3: context claims; 4: event log; 5: keys; 6: config rows;
#  7: cancel requests; 8: the retention index; 9: settle times on the database's clock
#: pg_advisory_xact_lock key of schema migrations ("a2a-gw" as an integer).
MIGRATION_LOCK = 0x613261_2D6777
#: pg_try_advisory_xact_lock key of a retention batch: one replica at a time.
RETENTION_LOCK = MIGRATION_LOCK + 1
#: The settled states as SQL, written out so the planner matches the partial index.
SETTLED_SQL = f"state IN ({', '.join(str(s) for s in sorted(TERMINAL))})"
DEFAULT_POOL_SIZE = 10
DEFAULT_LEASE_S = 30.0
#: NOTIFY channel of cancellation requests (payload: the task id).
CANCEL_CHANNEL = "a2a_cancel"
#: NOTIFY channel of new events in the log (payload: the task id).
EVENTS_CHANNEL = "a2a_events"
#: Events of a settled task are kept this long (late subscribers' reads), then pruned.
DEFAULT_EVENT_KEEP_S = 60.0
EVENT_BATCH = 1000
#: While the database is away, the stream events of this process's runs wait in
#: memory, up to this many bytes, and are written once it is back (tried every
#: OUTAGE_EVENTS_RETRY_S), so followers elsewhere read every one of them.
OUTAGE_EVENTS_KEPT_BYTES = 16 << 20
OUTAGE_EVENTS_RETRY_S = 0.5
#: ``application_name`` of the LISTEN connection (to tell it apart in pg_stat_activity).
LISTENER_NAME = "a2a-gateway listen"
#: Reconnecting a lost LISTEN connection: the first retry's delay, doubled up to the last.
LISTEN_RETRY_FIRST_S = 0.1
LISTEN_RETRY_MAX_S = 5.0
ACQUIRE_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 30.0
#: The states whose events are kept (a task in any other is settled: its events are
#: pruned ``event_keep_s`` after it settled).
EVENTS_KEPT = ACTIVE | INTERRUPTED
RETRY_KEY_OVERHEAD = 200
#: Group commit: at most this many save statements at a time (the saves that come
#: meanwhile wait for one to end, then go together), and this many saves in one.
SAVES_IN_FLIGHT = 2
SAVE_BATCH = 100

#: Migration n (1-based) takes the schema from version n-1 to n.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE a2a_tasks(
      task_id text COLLATE "C" PRIMARY KEY,
      workspace text NOT NULL,
      caller text NOT NULL,
      context_id text COLLATE "C" NOT NULL,
      state smallint NOT NULL,
      ts bigint NOT NULL,
      task bytea NOT NULL);
    CREATE INDEX a2a_tasks_by_owner ON a2a_tasks(workspace, caller, ts, task_id);
    CREATE INDEX a2a_tasks_by_state ON a2a_tasks(workspace, caller, state, ts, task_id);
    CREATE INDEX a2a_tasks_by_context
      ON a2a_tasks(workspace, caller, context_id, ts, task_id);
    CREATE TABLE a2a_push_configs(
      task_id text COLLATE "C" NOT NULL REFERENCES a2a_tasks ON DELETE CASCADE,
      position integer NOT NULL,
      config_id text NOT NULL,
      version text NOT NULL,
      config bytea NOT NULL,
      PRIMARY KEY(task_id, position));
    CREATE TABLE a2a_retry_keys(
      workspace text NOT NULL,
      caller text NOT NULL,
      message_id text NOT NULL,
      fingerprint text NOT NULL,
      task_id text COLLATE "C" NOT NULL REFERENCES a2a_tasks ON DELETE CASCADE,
      PRIMARY KEY(workspace, caller, message_id, fingerprint));
    CREATE INDEX a2a_retry_keys_by_task ON a2a_retry_keys(task_id);
    """,
    """
    ALTER TABLE a2a_tasks
      ADD COLUMN runner text NOT NULL DEFAULT '',
      ADD COLUMN lease_until bigint NOT NULL DEFAULT 0;
    """,
    """
    CREATE TABLE a2a_contexts(
      workspace text NOT NULL,
      caller text NOT NULL,
      context_id text COLLATE "C" NOT NULL,
      task_id text COLLATE "C" NOT NULL,
      runner text NOT NULL,
      lease_until bigint NOT NULL,
      PRIMARY KEY(workspace, caller, context_id));
    """,
    """
    ALTER TABLE a2a_tasks ADD COLUMN event_seq bigint NOT NULL DEFAULT 0;
    CREATE TABLE a2a_events(
      task_id text COLLATE "C" NOT NULL,
      seq bigint NOT NULL,
      event bytea NOT NULL,
      PRIMARY KEY(task_id, seq));
    """,
    """
    CREATE TABLE a2a_keys(name text PRIMARY KEY, value bytea NOT NULL);
    """,
    """
    ALTER TABLE a2a_push_configs DROP CONSTRAINT a2a_push_configs_pkey;
    ALTER TABLE a2a_push_configs ADD PRIMARY KEY (task_id, config_id),
      ADD COLUMN added_ns bigint NOT NULL DEFAULT 0;
    """,
    """
    ALTER TABLE a2a_contexts ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
    """,
    # Not CONCURRENTLY, on purpose: migrations run in one transaction (under the
    # migration lock), where CREATE INDEX CONCURRENTLY is refused, and a plain CREATE
    # INDEX holds a SHARE lock on a2a_tasks (saves wait) for the build. That costs
    # nothing here: the PostgreSQL store is new and no deployed database predates
    # schema 8, so this index is built at a database's first start, on an empty
    # table. A later migration that indexes a table already holding rows (a2a_tasks,
    # a2a_events) must build CONCURRENTLY outside the migration transaction (under a
    # session-level advisory lock, dropping an INVALID leftover of an interrupted
    # build first).
    f"""
    CREATE INDEX a2a_tasks_settled_by_age ON a2a_tasks(ts) WHERE {SETTLED_SQL};
    """,
    # When a task settled on the database's clock (the events' pruning; ``ts`` is the
    # runner's). Nullable without a default: no rewrite of a2a_tasks, a brief lock only.
    # Rows settled before it (or saved by a gateway not yet upgraded) have none: their
    # ``ts`` stands in.
    """
    ALTER TABLE a2a_tasks ADD COLUMN IF NOT EXISTS settled_ns bigint;
    """,
)
assert len(MIGRATIONS) == SCHEMA_VERSION


class StoreUnavailable(Exception):
    """The database cannot be reached or its schema is not ours (the message names
    neither the URL nor its password)."""


#: Of those, the ones that say the database is away rather than that a statement was
#: refused: connections refused, dropped or gone (PostgreSQL's class 08 and asyncpg's
#: client side), no pooled connection in time, a server shutting down, starting up or
#: out of connection slots (57P01-57P03, 53300; not a cancelled statement, 57014).
_OUTAGE_ERRORS = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.InterfaceError,
    StoreUnavailable,
)


def outage(exc: BaseException) -> bool:
    """A failure the outage's one WARNING already says (none of its own)."""
    return isinstance(exc, StoreOutageError)


def unnest_params(*params: str) -> str:
    """``unnest`` of array parameters (``"$1::text[]"``), each read through a sub-select.

    Then the planner guesses their length (10) in every plan, as it must in the generic
    plan, instead of counting the elements of each call's arrays: the generic plan of a
    statement of group commit costs as much as the custom ones, so PostgreSQL keeps it
    (under ``plan_cache_mode = auto``) instead of planning every call again, which cost
    about 370 us a statement, three times what the statement itself costs (measured).
    """
    return "unnest(" + ", ".join(f"(SELECT {param})" for param in params) + ")"


def filter_conditions(flt: TaskFilter, sql: list[str], params: list[Any]) -> None:
    """Append the filter's conditions (``$n`` numbered after ``params``)."""
    if flt.context_id:
        params.append(flt.context_id)
        sql.append(f"AND context_id = ${len(params)}")
    if flt.state:
        params.append(flt.state)
        sql.append(f"AND state = ${len(params)}")
    if flt.after_ns is not None:
        params.append(clamp(flt.after_ns))
        sql.append(f"AND ts >= ${len(params)}")


class Save(NamedTuple):
    """One save as the statement takes it: the first 14 fields are the columns of
    ``s``; the push configs (only written when the save creates the task) and the retry
    keys remembered since the last save are flattened, each naming its task."""

    task_id: str
    workspace: str
    caller: str
    context_id: str
    state: int
    ts: int
    task: bytes
    runner: str
    lease_until: int
    held: bool
    settles: bool
    event_seq: int | None
    as_of: int
    settled_now: bool
    config_ids: list[str]
    config_versions: list[str]
    configs: list[bytes]
    keys: list[tuple[str, str]]


def _task_of(save: Save) -> str:
    return save.task_id


class Lookup(NamedTuple):
    """A new message's retry lookup and the claim of its context (the columns of ``s``
    of ``lookup_or_claim``)."""

    workspace: str
    caller: str
    context_id: str
    task_id: str
    message_id: str
    fingerprint: str


def _context_of(lookup: Lookup) -> tuple[str, str, str]:
    return lookup.workspace, lookup.caller, lookup.context_id


class RoleHooks(abc.ABC):
    """What the roles' modules provide that the connection calls (see
    PostgresTaskStore): the lease renewer, the events' pruning and the LISTEN
    handlers."""

    @abc.abstractmethod
    async def _renew_leases(self) -> None:
        """(claims) Extend this process's leases every third of the lease."""

    @abc.abstractmethod
    async def prune_events(self) -> None:
        """(events) Drop the events of tasks settled more than ``event_keep_s`` ago."""

    @abc.abstractmethod
    async def _store_save(self, save: Save) -> asyncpg.Record:
        """(tasks) One save alone: its row."""

    @abc.abstractmethod
    async def _store_saves(self, saves: list[Save]) -> Sequence[asyncpg.Record]:
        """(tasks) One statement for saves of different tasks: a row each, in order."""

    @abc.abstractmethod
    async def _lookup_or_claim(self, one: Lookup) -> asyncpg.Record:
        """(retry keys) One new message's lookup alone: its row."""

    @abc.abstractmethod
    async def _lookups_or_claims(self, lookups: list[Lookup]) -> Sequence[asyncpg.Record]:
        """(retry keys) One statement for new messages' lookups: a row each, in order."""

    @abc.abstractmethod
    def _unhold(self, task_id: str) -> None:
        """(events) Log the events held back for a run nobody could see until now."""

    @abc.abstractmethod
    def _on_event(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """(events) A NOTIFY on the events channel."""

    @abc.abstractmethod
    def _on_cancel(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """(cancel) A NOTIFY on the cancel channel."""


class PgConnection(DatabaseClock, TaskStore, RoleHooks):
    """Tasks as rows of a PostgreSQL database (see the module docstring).

    The pool opens on :meth:`start` (which also migrates the schema), or on first use.
    """

    durable = True
    kind = "postgres"
    shares_events = True
    claims_in_lookup = True
    push_rows = True

    def __init__(
        self,
        url: str,
        *,
        box: SecretBox,
        pool_size: int = DEFAULT_POOL_SIZE,
        acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
        retry_keys: int = DEFAULT_RETRY_KEYS,
        retry_bytes: int = DEFAULT_RETRY_BYTES,
        lease_s: float = DEFAULT_LEASE_S,
        event_keep_s: float = DEFAULT_EVENT_KEEP_S,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._url = url
        #: This process's name in ``runner``: the runs it leases.
        self.replica = uuid.uuid4().hex
        self.lease_s = lease_s
        # The ticks that, plus the database's offset, are the database's time (leases,
        # push configs' ``added_ns``, the events' pruning cutoff); tests inject them.
        self._ticks = clock or time.monotonic_ns
        self._db_offset = 0  # the database's time minus _ticks(), read when the pool opens
        self._db_error = 0  # how far off that may be: half the round trip it was read in
        self._leased: set[str] = set()  # tasks saved submitted/working by this process
        self._renewer: asyncio.Task[None] | None = None
        self._listener: asyncpg.Connection | None = None  # LISTEN a2a_cancel, a2a_events
        self._listener_lost = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        #: How many times the LISTEN connection was lost and opened again.
        self.relistens = 0
        self._cancel_handler: Callable[[str], None] | None = None
        self._page_key: bytes | None = None
        self.event_keep_s = event_keep_s
        self._seq: dict[str, int] = {}  # runs of this process: their last event's number
        self._outbox: list[tuple[str, int, bytes]] = []
        # Runs of new tasks nobody can see yet (no row, no stream here): their events,
        # numbered but not logged (PgEventLogs.log_event; _unhold logs them).
        self._held: dict[str, list[tuple[int, Event]]] = {}
        self._writer: asyncio.Task[None] | None = None
        self._follows: dict[str, tuple[asyncio.Event, asyncio.Task[None]]] = {}
        self._delivered: dict[str, int] = {}  # followed tasks: the last event delivered
        self._last: dict[str, int] = {}  # followed tasks handed over: the last to deliver
        self.box = box
        self.pool_size = pool_size
        self.acquire_timeout_s = acquire_timeout_s
        self.command_timeout_s = command_timeout_s
        self._pool: asyncpg.Pool | None = None
        self._starting = asyncio.Lock()
        # Retry keys remembered since their task's last save: written with the next one.
        self._pending: dict[str, list[tuple[str, str]]] = {}
        # Each task's latest save still on its way: the next save of it starts after.
        self._saving: dict[str, asyncio.Task[None]] = {}
        # Saves of different tasks waiting at once go in one statement.
        self._saves: GroupCommit[Save] = GroupCommit(
            "saves", self._store_saves, self._store_save, _task_of, SAVES_IN_FLIGHT, SAVE_BATCH
        )
        # And so do new messages' retry lookups with their claims (one context once).
        self._lookups: GroupCommit[Lookup] = GroupCommit(
            "lookups",
            self._lookups_or_claims,
            self._lookup_or_claim,
            _context_of,
            SAVES_IN_FLIGHT,
            SAVE_BATCH,
        )
        # The keys this process wrote or read: find_message (synchronous) answers from
        # here; lookup_message asks the database on a miss.
        self._recent: ByteLRU[tuple[Caller, str, str], str] = ByteLRU(retry_keys, retry_bytes)
        self.outage = OutageLog("the task database")
        # Pooled connections the group commits' statements keep between statements
        # (no acquire and release each: _fetch_kept).
        self._kept = KeptConnections(
            pool_size, self.acquire_timeout_s, self._ready, lambda: self._pool, self._ticks
        )

    def __repr__(self) -> str:
        return "PostgresTaskStore(<database url>)"  # never the URL: it holds a password

    def _open(self, task_id: str, data: bytes) -> pb.TaskPushNotificationConfig | None:
        """A stored config with its secrets opened; None (and a warning) when one does
        not open, as in the file store."""
        sealed = pb.TaskPushNotificationConfig.FromString(data)
        try:
            return self.box.open_push_config(sealed)
        except SecretBoxError as exc:
            log.warning(
                "push config %s of task %s dropped: its secret does not open (%s)",
                sealed.id,
                task_id,
                exc,
            )
            return None

    # --- connecting and migrating ----------------------------------------------------

    async def start(self) -> None:
        """Open the pool and bring the schema to :data:`SCHEMA_VERSION` (idempotent);
        :class:`StoreUnavailable` when the database cannot be used."""
        await self._ready()

    async def _ready(self) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        async with self._starting:
            if self._pool is not None:
                return self._pool
            pool = await self._open_pool()
            try:  # nothing opened here outlives a failed start
                async with pool.acquire(timeout=self.acquire_timeout_s) as conn:
                    await migrate(conn)
                    await self._read_db_offset(conn)
                self._page_key = await self._read_page_key(pool)
                listener = await self._listen()  # the last step: closes itself on failure
            except BaseException as exc:
                await self._close(pool)
                if isinstance(exc, DB_ERRORS):
                    raise StoreUnavailable(f"the database is not usable: {why(exc)}") from None
                raise
            self._listener = listener
            self._listener_lost.clear()
            self._pool = pool
            loop = asyncio.get_running_loop()
            self._renewer = loop.create_task(self._renew_leases(), name="a2a-pg-leases")
            self._watcher = loop.create_task(self._keep_listening(), name="a2a-pg-listen")
            return pool

    async def _open_pool(self) -> asyncpg.Pool:
        """The pool, its first connection made: StoreUnavailable when that fails."""
        pool: asyncpg.Pool | None = None
        try:
            pool = await asyncpg.create_pool(
                self._url,
                # No floor: asyncpg would restore one by reconnecting in the background
                # while the database is away, logging a traceback per attempt.
                min_size=0,
                max_size=self.pool_size,
                command_timeout=self.command_timeout_s,
                timeout=self.acquire_timeout_s,
                reset=_keep_session,
            )
            async with pool.acquire(timeout=self.acquire_timeout_s):
                pass  # an unreachable database, or a URL that does not parse, shows here
        except BaseException as exc:
            if pool is not None:
                await self._close(pool)
            if isinstance(exc, DB_ERRORS):
                raise StoreUnavailable(f"cannot connect to the database: {why(exc)}") from None
            if isinstance(exc, ValueError):  # say, a port not a number
                # Not its text: it quotes the URL's pieces, which for a ``/``, ``?`` or
                # ``#`` left unencoded in the password are pieces of the password.
                raise StoreUnavailable(
                    "the database URL is not usable: it does not parse (a port that is not"
                    " a number; or a / ? # @ or : in the user name or password, which must"
                    " be percent-encoded)"
                ) from None
            raise
        return pool

    async def readiness(self) -> str | None:
        """Ready when a pooled connection answers ``SELECT 1`` (a pool that failed to
        open is retried here, as on any use)."""
        try:
            await self._fetch("SELECT 1")
        # Any failure: a connection the server ended can also raise asyncpg's
        # InternalClientError (not an InterfaceError) on its next use (measured).
        except Exception as exc:
            if not outage(exc):  # an outage has its own line (store_outage)
                log.warning("readiness: the database does not answer: %s", type(exc).__name__)
            return "the database does not answer"
        return None

    async def aclose(self) -> None:
        """Stop renewing leases and close the pool (a later use opens a new one)."""
        writer, self._writer = self._writer, None
        if writer is not None:  # the events still queued are written first (bounded)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(writer), self.command_timeout_s)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer
        self._held.clear()  # (runs unseen so far: nobody reads their events)
        saving = list(self._saving.values())
        if saving:  # the saves on their way land first (each is bounded)
            await asyncio.wait(saving, timeout=self.acquire_timeout_s + self.command_timeout_s)
        bound = self.acquire_timeout_s + self.command_timeout_s
        await self._saves.aclose(bound)  # (idle once the saves landed)
        await self._lookups.aclose(bound)
        await self._kept.aclose()
        follows, self._follows = list(self._follows.values()), {}
        self._delivered.clear()
        self._last.clear()
        for _, follower in follows:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await follower
        jobs = [job for job in (self._renewer, self._watcher) if job is not None]
        self._renewer = self._watcher = None
        for job in jobs:
            job.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job
        listener, self._listener = self._listener, None
        if listener is not None:
            await self._close(listener)
        pool, self._pool = self._pool, None
        if pool is not None:
            await self._close(pool)

    async def _listen(self) -> asyncpg.Connection:
        """A connection of its own LISTENing on the cancel and event channels."""
        listener = await asyncpg.connect(
            self._url,
            timeout=self.acquire_timeout_s,
            # Its LISTENs bounded like the pool's statements: one never answered (a
            # connection gone silent) fails, and the start or the reconnect goes on.
            command_timeout=self.command_timeout_s,
            server_settings={"application_name": LISTENER_NAME},
        )
        try:
            listener.add_termination_listener(self._on_listener_closed)
            await listener.add_listener(CANCEL_CHANNEL, self._on_cancel)
            await listener.add_listener(EVENTS_CHANNEL, self._on_event)
        except BaseException:
            await self._close(listener)
            raise
        return listener

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up (as far as this process knows)."""
        return self._listener is not None and not self._listener_lost.is_set()

    def _on_listener_closed(self, conn: object) -> None:
        if conn is self._listener:  # not one closed on purpose (aclose forgets it first)
            self._listener_lost.set()

    async def _check_listener(self) -> None:
        """Ask the LISTEN connection something (a connection dropped without a word,
        say by a firewall, shows only when used); mark it lost when it fails."""
        listener = self._listener
        if listener is None or self._listener_lost.is_set():
            return
        try:
            await asyncio.wait_for(listener.execute("SELECT 1"), self.command_timeout_s)
        except DB_ERRORS:
            if listener is self._listener:
                self._listener_lost.set()

    async def _keep_listening(self) -> None:
        """When the LISTEN connection is lost: open it again (retrying with a growing
        delay), then catch up on what its absence hid (:meth:`_catch_up`)."""
        delay = LISTEN_RETRY_FIRST_S
        while True:
            await self._listener_lost.wait()
            lost, self._listener = self._listener, None
            if lost is not None:
                lost.terminate()
                log.warning(
                    "lost the database connection that hears cancels and events of other"
                    " gateways: reconnecting"
                )
            try:
                listener = await self._listen()
            except Exception as exc:  # whatever it is, the next attempt may work
                if not self.outage.down:  # else the outage's line says it
                    log.warning("could not listen again (retrying in %.1fs): %s", delay, why(exc))
            else:
                self._listener = listener
                self._listener_lost.clear()
                self.relistens += 1
                try:
                    caught_up = await self._catch_up()
                except Exception:  # were this task to end, nothing would listen again
                    log.exception("catching up after listening again failed (retrying)")
                    self._listener_lost.set()
                    caught_up = False
                if caught_up:
                    delay = LISTEN_RETRY_FIRST_S
                    log.info("listening again for cancels and events of other gateways")
                    continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, LISTEN_RETRY_MAX_S)

    async def _catch_up(self) -> bool:
        """After listening again: every follower re-reads its task's events from where
        it stopped, and the runs of this process whose cancellation was requested
        meanwhile are cancelled. False (and the connection counted lost again) when
        the database did not answer."""
        for poke, _ in list(self._follows.values()):
            poke.set()
        handler = self._cancel_handler
        if handler is None:
            return True
        try:
            rows = await self._fetch(
                "SELECT task_id FROM a2a_contexts WHERE runner = $1 AND cancel_requested",
                self.replica,
            )
        except DB_ERRORS as exc:
            if not outage(exc):
                log.warning("could not read the cancel requests missed: %s", why(exc))
            self._listener_lost.set()
            return False
        for row in rows:
            handler(str(row[0]))
        return True

    async def _close(self, closable: asyncpg.Pool | asyncpg.Connection) -> None:
        """Close gracefully within ``command_timeout_s``, else drop the connections
        (a connection already broken is dropped without a word)."""
        try:
            await asyncio.wait_for(closable.close(), self.command_timeout_s)
        except (TimeoutError, *DB_ERRORS):
            closable.terminate()

    async def truncate(self) -> None:
        """Remove every task, push config, retry key and context claim (tests start
        from empty)."""
        await self._fetch(
            "TRUNCATE a2a_tasks, a2a_push_configs, a2a_retry_keys, a2a_contexts, a2a_events"
        )
        self._pending.clear()
        self._recent = ByteLRU(self._recent.max_entries, self._recent.max_bytes)

    async def _fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        with self._database_call():
            pool = await self._ready()
            async with pool.acquire(timeout=self.acquire_timeout_s) as conn:
                return list(await conn.fetch(sql, *args))

    async def _fetch_kept(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """:meth:`_fetch` for the group commits' statements (saves, lookups), on a pooled
        connection kept between them (``kept.py``)."""
        with self._database_call():
            return await self._kept.fetch(sql, *args)

    @contextlib.contextmanager
    def _database_call(self) -> Iterator[None]:
        """Around one use of the database: a sign that the database is away becomes
        StoreOutageError (the protocol's UNAVAILABLE; the outage is logged once, see
        ``store_outage``); a use that succeeds ends an outage."""
        started = time.monotonic()
        try:
            yield
        except _OUTAGE_ERRORS as exc:
            self.outage.failed(why(exc))
            raise StoreOutageError() from None
        self.outage.answered(started)

    def on_outage(self, handler: Callable[[], None]) -> None:
        self.outage.listen(handler)

    # --- page tokens -----------------------------------------------------------------

    def page_token_key(self) -> bytes | None:
        return self._page_key

    async def _read_page_key(self, pool: asyncpg.Pool) -> bytes:
        """The database's page-token key (made by the first process that asks)."""
        async with pool.acquire(timeout=self.acquire_timeout_s) as conn:
            await conn.execute(
                "INSERT INTO a2a_keys(name, value) VALUES ('page_tokens', $1)"
                " ON CONFLICT DO NOTHING",
                os.urandom(32),
            )
            return bytes(
                await conn.fetchval("SELECT value FROM a2a_keys WHERE name = 'page_tokens'")
            )


async def migrate(conn: asyncpg.Connection | PoolConnectionProxy) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION` under the migration lock; the
    version found before. StoreUnavailable for a newer schema."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute("CREATE TABLE IF NOT EXISTS a2a_schema(version integer PRIMARY KEY)")
        found = int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM a2a_schema"))
        if found > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"the database's a2a schema is version {found}, newer than this gateway's"
                f" ({SCHEMA_VERSION}): upgrade the gateway"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute("INSERT INTO a2a_schema VALUES ($1)", version)
            log.info("task database: schema migrated to version %d", version)
        return found


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """A released pooled connection keeps its session: nothing here sets session state
    (no SET, LISTEN, cursor or session-level advisory lock on a pooled connection), so
    asyncpg's default reset query is one wasted round trip per statement. asyncpg still
    rolls back a transaction left open and drops listeners before calling this."""


def why(exc: BaseException) -> str:
    """An error's reason without the URL (asyncpg's messages name host and user at
    most; the text is cut so nothing long is echoed)."""
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text[:300]}"
