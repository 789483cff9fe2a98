"""The PostgreSQL task store (``serve --store postgres --database-url postgresql://...``).

Tasks are rows, so several gateway processes can share one database's tasks (what
more is needed before several replicas can serve one workspace is in
docs/replicas.md). Schema (version :data:`SCHEMA_VERSION`, tables prefixed
``a2a_``):

- ``a2a_tasks``: one row per task: id, owner (workspace and caller name), context id,
  state, status timestamp in ns, and the Task as protobuf bytes (``bytea``; smaller
  and ~700x cheaper to decode than ProtoJSON, see docs/performance.md). ListTasks'
  filters and order have their indexes: (owner, ts, id), (owner, state, ts, id) and
  (owner, context, ts, id), ids in the "C" collation so SQL orders them as Python does;
  and, once the task settled, when it did on the database's clock (``settled_ns``);
- ``a2a_push_configs``: the push configs of a task, one row per (task, config id), in
  the order they were added (``position``), with the A2A version each was registered
  with; ``token`` and ``authentication.credentials`` sealed with the
  :class:`~.secret_box.SecretBox` of the first workspace (every replica needs the same
  ``.a2a/secret.key``); a config whose secret does not open is dropped with a warning,
  as in the file store. Any process adds, replaces or removes one row at a time
  (:meth:`~PostgresTaskStore.add_push_config` locks the task's row, so the cap holds
  across processes); a task's save writes its record's configs only when it creates
  the task, and otherwise answers the rows as of its commit into the record
  (``TaskRecord.push_as_of``), so the runner's saves never drop or revive a config
  changed elsewhere, and the runner delivers each status change to the rows stored
  then (:mod:`.engine.push_feed`);
- ``a2a_retry_keys``: the messageId retry keys (owner, messageId, fingerprint ->
  task), a primary key, so one key names one task across every process on the
  database; removed with their task.

The gateway creates and migrates the schema itself when it starts (:meth:`start`):
migrations are numbered, each runs once, recorded in ``a2a_schema``, all inside one
transaction that first takes a transaction-level advisory lock, so N processes
starting at once run each migration once and the others wait, then see it done. A
database whose schema is newer than this gateway's is refused at start. A start that
fails at any step (connecting, migrating, listening; unreachable, slow or refused) is
:class:`StoreUnavailable` and closes whatever it opened.

Runs are leased: a save of a submitted or working task by this process names it the
task's ``runner`` with ``lease_until`` ``lease_s`` ahead, renewed every third of that
while the task stays active here; a settled save clears it. A process loading an
active task whose lease another runner still holds marks the record
``held_elsewhere``, so the engine leaves it alone instead of failing it "server
restarted"; once the lease has expired (its process died) the first reader fails it,
the file store's lazy recovery made cluster-wide. Leases are on the database's clock,
so replicas whose clocks disagree still agree on them: when its pool opens, a process
reads the database's time (``clock_timestamp()``, taken as the middle of the round
trip) and keeps its offset from its own monotonic clock; every ``lease_until`` it
writes and every lease it compares is that clock plus the offset. A push config's
``added_ns`` is the database's own time of its insert; the status time of a change (the
runner's wall clock) is moved onto that clock by the runner before they are compared
(:meth:`PostgresTaskStore._status_to_db`), so a config added on a replica whose clock
is off gets the runner's next status change, neither none nor ones long before it.
A change made where no run exists (that recovery, CancelTask of a task waiting for
input, the hop guard failing one) is stored by :meth:`replace`: only if the row still
has the state and status time it was read with, no other live process holds its
lease, and none holds a claim of its context for it; so of two processes making it at
once exactly one stores it (and announces it to webhooks).

One run per (caller, context) across processes: before a run starts, its process
claims the context in ``a2a_contexts`` (a primary key; taken over only when the
holder's lease expired; never for a task stored otherwise than a continuation read
it, so it does not run a task another process cancelled, or ran a turn of, after
this one read it); the save that settles
or interrupts the task removes the claim, and the claim's lease is renewed with the
task's.

Stream events cross processes through ``a2a_events``: every event of a run of this
process is numbered per task (continuing from the number the task's row holds when
the run claims its context), written in order by one writer task in batches, each
batch with one ``NOTIFY a2a_events`` per task. A row's ``event_seq`` is the number of
events its task reflects (a settling save counts the status event that follows it),
so a subscriber elsewhere starts from its snapshot's number and reads the rest, in
order, when a NOTIFY names the task (:meth:`follow`); once a lease without news it
checks that the run still has a live runner. When the run moves to this process (a
continuation claims the context of a task it follows), the follow first delivers every
event numbered up to the claim's, then ends (:meth:`hand_over`): the run's own events
come next. Events of tasks settled more than
``event_keep_s`` ago (by the database's clock: ``settled_ns``, noted by the database when
the settling save lands, not the runner's status time) are pruned with the lease renewals.

ListTasks page tokens are signed with a key kept in ``a2a_keys`` (made by the first
process), so a token issued by one process is read by every other.

Retention (``--task-retention``, :meth:`expire`): a batch is one statement in a
transaction that first tries a transaction-level advisory lock (:data:`RETENTION_LOCK`),
so one replica removes at a time and the others skip their pass. It removes the oldest
settled tasks before the cutoff (a partial index on ``ts`` of settled rows), skipping
rows a save holds locked (``SKIP LOCKED``), with their events and any context claim
left; push configs and retry keys go with the row (``ON DELETE CASCADE``). Retry keys
this process cached stay cached: a hit on a removed task finds no task and the message
is taken as new, as with no key.

CancelTask of a run held by another process is recorded on the run's context claim
(``a2a_contexts.cancel_requested``, gone with the claim when the run ends) and sent to
it as ``NOTIFY a2a_cancel`` (payload: the task id); every process LISTENs on its own
connection and cancels the run if it is its own (the engine's handler,
:meth:`on_cancel_request`).

The LISTEN connection (``application_name`` :data:`LISTENER_NAME`) is watched:
asyncpg's termination callback, and a ``SELECT 1`` on it with every lease renewal (a
connection dropped silently shows only when used).
Once lost it is opened again, retrying after :data:`LISTEN_RETRY_FIRST_S` doubling up
to :data:`LISTEN_RETRY_MAX_S`, then the process catches up on what it may have missed:
every follower re-reads its task's events from the number after the last it delivered
(no gap, no duplicate), and every run of this process whose claim has a cancel request
is cancelled.

A save is one statement (the task row, the push configs of a task it creates, the
retry keys remembered for it since its last save), so it is atomic without a
transaction block. The saves of one task by this process are chained (each statement
starts when the task's previous one ended; a cancelled save still lands in its place),
so they land in call order as the file store's do; different tasks' saves run at once.
Across processes a stored terminal state is final: no later save replaces it (the run
of a process that stalled past its lease cannot revive a task another process failed
"server restarted" meanwhile; a warning names the save not stored). The other writers
of a task row cannot bring back an older state: lease renewals change only
``lease_until`` of rows this process still runs, cancel requests only the context
claim, and retention removes only settled rows. A ListTasks
page is one statement too (page, count and the named rows: one snapshot). Every wait
is bounded: taking a pooled connection (``acquire_timeout_s``) and every statement
(``command_timeout_s``). Errors never carry the URL; its password is registered with
the log redaction by the caller (``gateway.serve``).

While the database is away (an outage: connections refused or dropped, no pooled
connection in time, a server shutting down), every call raises
:class:`~.store_outage.StoreOutageError`, the protocol's UNAVAILABLE, logged once per
outage (:class:`~.store_outage.OutageLog`), and the first call that succeeds after it
ends it; stream events of runs here wait for its end (bounded) instead of being
dropped. See docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from .byte_lru import ByteLRU
from .file_store import remove_inbox_files
from .lifecycle import ACTIVE, INTERRUPTED, TERMINAL, valid_id
from .secret_box import SecretBox, SecretBoxError
from .store_outage import OutageLog, StoreOutageError
from .task_store import (
    DEFAULT_RETRY_BYTES,
    DEFAULT_RETRY_KEYS,
    STORE_RETRY_PAUSES_S,
    UNSTORED,
    Listing,
    PushAdded,
    StatusKey,
    StoredPush,
    TaskFilter,
    TaskRecord,
    TaskStore,
    TaskSummary,
    Window,
    status_key,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 9  # 2: leases; 3: context claims; 4: event log; 5: keys; 6: config rows;
#  7: cancel requests; 8: the retention index; 9: settle times on the database's clock
#: pg_advisory_xact_lock key of schema migrations ("a2a-gw" as an integer).
MIGRATION_LOCK = 0x613261_2D6777
#: pg_try_advisory_xact_lock key of a retention batch: one replica at a time.
RETENTION_LOCK = MIGRATION_LOCK + 1
#: The settled states as SQL, written out so the planner matches the partial index.
_SETTLED_SQL = f"state IN ({', '.join(str(s) for s in sorted(TERMINAL))})"
DEFAULT_POOL_SIZE = 10
DEFAULT_LEASE_S = 30.0
#: NOTIFY channel of cancellation requests (payload: the task id).
CANCEL_CHANNEL = "a2a_cancel"
#: NOTIFY channel of new events in the log (payload: the task id).
EVENTS_CHANNEL = "a2a_events"
#: Events of a settled task are kept this long (late subscribers' reads), then pruned.
DEFAULT_EVENT_KEEP_S = 60.0
_EVENT_BATCH = 1000
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
_INT64_MAX = (1 << 63) - 1
#: The database's time now, in ns (its own clock, whatever the clocks of the processes).
_DB_NOW_SQL = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint"
#: The states whose events are kept (a task in any other is settled: its events are
#: pruned ``event_keep_s`` after it settled).
_EVENTS_KEPT = ACTIVE | INTERRUPTED
_RETRY_KEY_OVERHEAD = 200

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
    CREATE INDEX a2a_tasks_settled_by_age ON a2a_tasks(ts) WHERE {_SETTLED_SQL};
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

# A stored terminal state is final: no save replaces it (say, the run of a process
# that stalled past its lease settling a task another process already failed "server
# restarted", or a continuation's save landing after a cancel from another process).
_SAVE = f"""
WITH t AS (
  INSERT INTO a2a_tasks(task_id, workspace, caller, context_id, state, ts, task, runner,
    lease_until, event_seq, settled_ns)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $13, $14, coalesce($17, 0),
    CASE WHEN $19 THEN {_DB_NOW_SQL} END)
  ON CONFLICT (task_id) DO UPDATE SET workspace = excluded.workspace,
    caller = excluded.caller, context_id = excluded.context_id, state = excluded.state,
    ts = excluded.ts, task = excluded.task,
    runner = CASE WHEN $15 THEN a2a_tasks.runner ELSE excluded.runner END,
    lease_until = CASE WHEN $15 THEN a2a_tasks.lease_until ELSE excluded.lease_until END,
    event_seq = coalesce($17, a2a_tasks.event_seq), settled_ns = excluded.settled_ns
  WHERE NOT a2a_tasks.{_SETTLED_SQL}
  RETURNING task_id),
push AS (
  INSERT INTO a2a_push_configs(task_id, position, config_id, version, config)
  SELECT (SELECT task_id FROM t), c.n - 1, c.id, c.version, c.config
  FROM unnest($8::text[], $9::text[], $10::bytea[]) WITH ORDINALITY AS c(id, version, config, n)
  WHERE NOT EXISTS (SELECT 1 FROM a2a_tasks WHERE task_id = $1)
  ON CONFLICT DO NOTHING),
settled AS (
  DELETE FROM a2a_contexts WHERE $16 AND workspace = $2 AND caller = $3
    AND context_id = $4 AND task_id = $1),
retry AS (
  INSERT INTO a2a_retry_keys(workspace, caller, message_id, fingerprint, task_id)
  SELECT $2, $3, k.message_id, k.fingerprint, coalesce((SELECT task_id FROM t), $1)
  FROM unnest($11::text[], $12::text[]) AS k(message_id, fingerprint)
  ON CONFLICT DO NOTHING)
SELECT NOT EXISTS (SELECT 1 FROM a2a_tasks WHERE task_id = $1) AS created,
  EXISTS (SELECT 1 FROM t) AS written,
  (SELECT state FROM a2a_tasks WHERE task_id = $1) AS stored_state,
  (SELECT ts FROM a2a_tasks WHERE task_id = $1) AS stored_ts,
  ARRAY(SELECT p.config FROM a2a_push_configs p WHERE p.task_id = $1 AND p.added_ns <= $18
        ORDER BY p.position) AS configs,
  ARRAY(SELECT p.version FROM a2a_push_configs p WHERE p.task_id = $1 AND p.added_ns <= $18
        ORDER BY p.position) AS versions
"""

# A change where no run exists: only if the row is as loaded ($7 state, $8 ts), and
# no other live process holds its run's lease or a claim of its context for it; with
# the retry keys remembered for it since its last save ($13, $14).
_REPLACE = f"""
WITH t AS (
  UPDATE a2a_tasks SET state = $4, ts = $5, task = $6, runner = '', lease_until = 0,
    settled_ns = CASE WHEN $15 THEN {_DB_NOW_SQL} END
  WHERE task_id = $1 AND workspace = $2 AND caller = $3 AND state = $7 AND ts = $8
    AND (runner = '' OR runner = $9 OR lease_until < $10)
    AND NOT EXISTS (SELECT 1 FROM a2a_contexts c WHERE c.task_id = $1 AND c.runner <> $9
                    AND c.lease_until >= $10)
  RETURNING context_id),
settled AS (
  DELETE FROM a2a_contexts c USING t WHERE $11 AND c.workspace = $2 AND c.caller = $3
    AND c.context_id = t.context_id AND c.task_id = $1),
retry AS (
  INSERT INTO a2a_retry_keys(workspace, caller, message_id, fingerprint, task_id)
  SELECT $2, $3, k.message_id, k.fingerprint, $1
  FROM unnest($13::text[], $14::text[]) AS k(message_id, fingerprint)
  WHERE EXISTS (SELECT 1 FROM t)
  ON CONFLICT DO NOTHING)
SELECT EXISTS (SELECT 1 FROM t) AS replaced,
  ARRAY(SELECT p.config FROM a2a_push_configs p WHERE p.task_id = $1 AND p.added_ns <= $12
        ORDER BY p.position) AS configs,
  ARRAY(SELECT p.version FROM a2a_push_configs p WHERE p.task_id = $1 AND p.added_ns <= $12
        ORDER BY p.position) AS versions
"""

_READ_PUSH = """
SELECT config, version, added_ns FROM a2a_push_configs WHERE task_id = $1 ORDER BY position
"""

_PUT_PUSH = f"""
INSERT INTO a2a_push_configs AS p(task_id, position, config_id, version, config, added_ns)
VALUES ($1, $2, $3, $4, $5, {_DB_NOW_SQL})
ON CONFLICT (task_id, config_id) DO UPDATE SET version = excluded.version,
  config = excluded.config
"""

_LOAD = """
SELECT t.task,
  ARRAY(SELECT p.config FROM a2a_push_configs p WHERE p.task_id = t.task_id
        ORDER BY p.position) AS configs,
  ARRAY(SELECT p.version FROM a2a_push_configs p WHERE p.task_id = t.task_id
        ORDER BY p.position) AS versions,
  t.runner, t.lease_until, t.event_seq, t.state, t.ts
FROM a2a_tasks t WHERE t.task_id = $1 AND t.workspace = $2 AND t.caller = $3
"""

# Not for a task another process settled since it was read (a CancelTask there), nor,
# for a task read as ($8 state, $9 ts), one stored otherwise now (a turn of it ran
# elsewhere since: a run from the task as read would drop that turn). A live claim is
# taken over only by its own process (one whose release was lost): the same task's
# claim held by another process is that process's run of it (a continuation there
# since this one read the task), not one to run twice.
_CLAIM = f"""
INSERT INTO a2a_contexts AS c(workspace, caller, context_id, task_id, runner, lease_until)
SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint
WHERE NOT EXISTS (SELECT 1 FROM a2a_tasks t WHERE t.task_id = $4 AND t.{_SETTLED_SQL})
  AND ($8::smallint IS NULL OR EXISTS (SELECT 1 FROM a2a_tasks t WHERE t.task_id = $4
                                       AND t.state = $8 AND t.ts = $9::bigint))
ON CONFLICT (workspace, caller, context_id) DO UPDATE SET task_id = excluded.task_id,
  runner = excluded.runner, lease_until = excluded.lease_until, cancel_requested = false
  WHERE c.lease_until < $7 OR (c.task_id = excluded.task_id AND c.runner = excluded.runner)
RETURNING task_id, (SELECT event_seq FROM a2a_tasks WHERE task_id = $4) AS event_seq
"""

_LOG_EVENTS = """
WITH logged AS (
  INSERT INTO a2a_events(task_id, seq, event)
  SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
  ON CONFLICT DO NOTHING
  RETURNING task_id)
SELECT pg_notify('a2a_events', t) FROM (SELECT DISTINCT task_id AS t FROM logged) AS n
"""

# A cancel request is kept on the run's context claim (which ends with the run), so the
# run's process finds it even when it missed the NOTIFY.
_REQUEST_CANCEL = """
WITH flagged AS (UPDATE a2a_contexts SET cancel_requested = true WHERE task_id = $2)
SELECT pg_notify($1, $2)
"""

# A retention batch: the oldest settled tasks before the cutoff (rows a save holds
# are left for the next batch), with their events and any claim left; push configs
# and retry keys go with the task row (ON DELETE CASCADE).
_EXPIRE = f"""
WITH doomed AS (
  SELECT task_id FROM a2a_tasks WHERE {_SETTLED_SQL} AND ts < $1
  ORDER BY ts LIMIT $2 FOR UPDATE SKIP LOCKED),
events AS (DELETE FROM a2a_events e USING doomed d WHERE e.task_id = d.task_id),
claims AS (DELETE FROM a2a_contexts c USING doomed d WHERE c.task_id = d.task_id)
DELETE FROM a2a_tasks t USING doomed d WHERE t.task_id = d.task_id
RETURNING t.workspace, CASE WHEN $3 THEN t.task END AS task
"""

_FIND_MESSAGE = (
    "SELECT task_id FROM a2a_retry_keys"
    " WHERE workspace = $1 AND caller = $2 AND message_id = $3 AND fingerprint = $4"
)


class StoreUnavailable(Exception):
    """The database cannot be reached or its schema is not ours (the message names
    neither the URL nor its password)."""


#: What a database call raises when the database is unreachable, slow or refuses
#: (a call that meets an outage raises StoreOutageError).
_DB_ERRORS = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    TimeoutError,
    StoreOutageError,
)
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


def _outage(exc: BaseException) -> bool:
    """A failure the outage's one WARNING already says (none of its own)."""
    return isinstance(exc, StoreOutageError)


#: Status times are stamped to the millisecond (rounded down).
_STAMP_NS = 1_000_000


def _clamp(value: int) -> int:
    return max(min(value, _INT64_MAX), -_INT64_MAX)


def _where(flt: TaskFilter, sql: list[str], params: list[Any]) -> None:
    """Append the filter's conditions (``$n`` numbered after ``params``)."""
    if flt.context_id:
        params.append(flt.context_id)
        sql.append(f"AND context_id = ${len(params)}")
    if flt.state:
        params.append(flt.state)
        sql.append(f"AND state = ${len(params)}")
    if flt.after_ns is not None:
        params.append(_clamp(flt.after_ns))
        sql.append(f"AND ts >= ${len(params)}")


class PostgresTaskStore(TaskStore):
    """Tasks as rows of a PostgreSQL database (see the module docstring).

    The pool opens on :meth:`start` (which also migrates the schema), or on first use.
    """

    durable = True
    kind = "postgres"
    shares_events = True
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
        # The keys this process wrote or read: find_message (synchronous) answers from
        # here; lookup_message asks the database on a miss.
        self._recent: ByteLRU[tuple[Caller, str, str], str] = ByteLRU(retry_keys, retry_bytes)
        self.outage = OutageLog("the task database")

    def __repr__(self) -> str:
        return "PostgresTaskStore(<database url>)"  # never the URL: it holds a password

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
                if isinstance(exc, _DB_ERRORS):
                    raise StoreUnavailable(f"the database is not usable: {_why(exc)}") from None
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
            if isinstance(exc, _DB_ERRORS):
                raise StoreUnavailable(f"cannot connect to the database: {_why(exc)}") from None
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
            if not _outage(exc):  # an outage has its own line (store_outage)
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
        saving = list(self._saving.values())
        if saving:  # the saves on their way land first (each is bounded)
            await asyncio.wait(saving, timeout=self.acquire_timeout_s + self.command_timeout_s)
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
        except _DB_ERRORS:
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
                    log.warning("could not listen again (retrying in %.1fs): %s", delay, _why(exc))
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
        except _DB_ERRORS as exc:
            if not _outage(exc):
                log.warning("could not read the cancel requests missed: %s", _why(exc))
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
        except (TimeoutError, *_DB_ERRORS):
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

    @contextlib.contextmanager
    def _database_call(self) -> Iterator[None]:
        """Around one use of the database: a sign that the database is away becomes
        StoreOutageError (the protocol's UNAVAILABLE; the outage is logged once, see
        ``store_outage``); a use that succeeds ends an outage."""
        started = time.monotonic()
        try:
            yield
        except _OUTAGE_ERRORS as exc:
            self.outage.failed(_why(exc))
            raise StoreOutageError() from None
        self.outage.answered(started)

    def on_outage(self, handler: Callable[[], None]) -> None:
        self.outage.listen(handler)

    # --- reading ---------------------------------------------------------------------

    async def load(self, owner: Caller, task_id: str) -> TaskRecord | None:
        if not valid_id(task_id):
            return None
        rows = await self._fetch(_LOAD, task_id, owner.workspace, owner.name)
        if not rows:
            return None
        row = rows[0]
        task = pb.Task.FromString(row["task"])
        configs, versions = self._open_configs(task_id, row["configs"], row["versions"])
        held = bool(row["runner"]) and row["runner"] != self.replica
        held = held and row["lease_until"] > self._db_now()
        return TaskRecord(
            task,
            owner,
            configs,
            versions,
            held_elsewhere=held,
            event_seq=row["event_seq"],
            loaded_as=(row["state"], row["ts"]),
        )

    def _open_configs(
        self, task_id: str, sealed_configs: list[bytes], versions_of: list[str]
    ) -> tuple[list[pb.TaskPushNotificationConfig], dict[str, str]]:
        """Configs as stored (sealed) opened, and the versions of those not on 1.0."""
        configs: list[pb.TaskPushNotificationConfig] = []
        versions: dict[str, str] = {}
        for data, version in zip(sealed_configs, versions_of, strict=True):
            config = self._open(task_id, data)
            if config is not None:
                configs.append(config)
                if version:
                    versions[config.id] = version
        return configs, versions

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

    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing:
        cursor, limit, task_ids = window
        params: list[Any] = [owner.workspace, owner.name]
        conditions: list[str] = []
        _where(flt, conditions, params)
        where = "workspace = $1 AND caller = $2 " + " ".join(conditions)
        page = [f"SELECT task_id, context_id, state, ts FROM a2a_tasks WHERE {where}"]
        if cursor is not None:
            params.extend((_clamp(cursor[0]), cursor[1]))
            page.append(f"AND (ts, task_id) < (${len(params) - 1}, ${len(params)})")
        params.append(min(limit, _INT64_MAX))
        page.append(f"ORDER BY ts DESC, task_id DESC LIMIT ${len(params)}")
        params.append(list(task_ids))
        sql = (
            f"WITH page AS ({' '.join(page)})"
            " SELECT 0 AS kind, task_id, context_id, state, ts FROM page"
            f" UNION ALL SELECT 1, NULL, NULL, NULL, count(*) FROM a2a_tasks WHERE {where}"
            " UNION ALL SELECT 2, task_id, context_id, state, ts FROM a2a_tasks"
            f" WHERE workspace = $1 AND caller = $2 AND task_id = ANY(${len(params)}::text[])"
        )
        rows = await self._fetch(sql, *params)
        listed: list[TaskSummary] = []
        named: list[TaskSummary] = []
        total = 0
        for kind, task_id, context_id, state, ts in rows:
            if kind == 1:
                total = int(ts)
            else:
                (listed if kind == 0 else named).append(TaskSummary(task_id, context_id, state, ts))
        listed.sort(key=lambda s: s.position, reverse=True)  # UNION ALL keeps no order
        return listed, total, named

    def store_gauges(self) -> Mapping[str, int]:
        """The pool's connections (open, in use, the most) and the LISTEN reconnects."""
        pool = self._pool
        size = pool.get_size() if pool is not None else 0
        idle = pool.get_idle_size() if pool is not None else 0
        return {
            "pool_size": size,
            "pool_in_use": size - idle,
            "pool_max": self.pool_size,
            "listen_reconnects": self.relistens,
        }

    async def count_by_state(self) -> Mapping[int, int] | None:
        """All the database's tasks (every process sharing it), per state."""
        rows = await self._fetch("SELECT state, count(*) FROM a2a_tasks GROUP BY state")
        return {int(state): int(n) for state, n in rows}

    async def active_ids(self, owner: Caller) -> list[str]:
        rows = await self._fetch(
            "SELECT task_id FROM a2a_tasks"
            " WHERE workspace = $1 AND caller = $2 AND state = ANY($3::smallint[])",
            owner.workspace,
            owner.name,
            sorted(ACTIVE),
        )
        return [str(r[0]) for r in rows]

    # --- writing ---------------------------------------------------------------------

    async def save(self, record: TaskRecord) -> None:
        task = record.task
        task_id = task.id
        if not valid_id(task_id):
            raise ValueError(f"invalid task id {task_id!r}")
        if self._pool is None:  # a first use: the lease below needs the database's time
            await self._ready()
        # Everything is captured before the first suspension (the engine goes on
        # changing a live task).
        owner = record.owner
        summary = TaskSummary.of(task)
        data = task.SerializeToString()
        saved_status = status_key(task)
        # Written only when this save creates the task (then no other process knew it);
        # later changes are rows of their own (add_push_config, remove_push_config).
        sealed = [self.box.seal_push_config(c, keep_sealed=False) for c in record.push_configs]
        versions = record.push_versions
        unstored = record.push_as_of == UNSTORED
        record.push_as_of = None  # while this save is on its way, the configs are unknown
        keys = self._pending.pop(task_id, [])
        # The events the saved task reflects: those logged so far, and the status event
        # a settling save is followed by (the engine stores a final state, then shows it).
        event_seq = self._seq.get(task_id)
        if event_seq is not None and summary.state not in ACTIVE:
            event_seq += 1
        runner, lease_until = "", 0
        if summary.state in ACTIVE and not record.held_elsewhere:
            runner, lease_until = self.replica, self._lease_until()
            self._leased.add(task_id)
        else:
            self._leased.discard(task_id)
        args = (
            task_id,
            owner.workspace,
            owner.name,
            summary.context_id,
            summary.state,
            _clamp(summary.timestamp_ns),
            data,
            [c.id for c in sealed],
            [versions.get(c.id, "") for c in sealed],
            [c.SerializeToString() for c in sealed],
            [k[0] for k in keys],
            [k[1] for k in keys],
            runner,
            lease_until,
            record.held_elsewhere,
            summary.state not in ACTIVE,
            event_seq,
            self._db_time(summary.timestamp_ns),  # $18: the configs it answers
            summary.state not in _EVENTS_KEPT,  # $19: settled (its time noted)
        )
        # Saves of one task are chained: each statement starts once the one before
        # has ended, so they land in call order (on separate pooled connections they
        # could overtake each other: a background save of WORKING still waiting for a
        # new connection while the run's FAILED found an open one). Each runs in a
        # task of its own, so a cancelled save still lands in its place and the chain
        # never waits on a statement nobody runs; different tasks stay concurrent.
        before = self._saving.get(task_id)
        write = asyncio.get_running_loop().create_task(
            self._write(before, record, args, keys, unstored, saved_status),
            name=f"a2a-pg-save-{task_id}",
        )
        self._saving[task_id] = write
        write.add_done_callback(lambda done: self._saved(task_id, done))
        await asyncio.shield(write)

    def _saved(self, task_id: str, write: asyncio.Task[None]) -> None:
        """A save's statement ended: forget it unless a later save of the task follows
        (nothing stays per task), and take its error (its caller may be gone)."""
        if self._saving.get(task_id) is write:
            del self._saving[task_id]
        if not write.cancelled():
            write.exception()

    async def _write(
        self,
        before: asyncio.Task[None] | None,
        record: TaskRecord,
        args: tuple[Any, ...],
        keys: list[tuple[str, str]],
        unstored: bool,
        saved_status: StatusKey,
    ) -> None:
        """One save's statement, once the task's previous save ended. That one is
        bounded itself (a pooled connection within ``acquire_timeout_s``, the statement
        within ``command_timeout_s``); should it take longer still (waiting in turn on
        its own predecessor), this one goes ahead rather than wait without end."""
        task_id = args[0]
        if before is not None and not before.done():
            await asyncio.wait({before}, timeout=self.acquire_timeout_s + self.command_timeout_s)
        try:
            rows = await self._fetch(_SAVE, *args)
        except BaseException:
            if keys:  # the next save of the task writes them
                self._pending.setdefault(task_id, []).extend(keys)
            if unstored:  # a failed statement created nothing
                record.push_as_of = UNSTORED
            raise
        row = rows[0]
        # Not written, and not this very status written before (a write tried again
        # after an error that came after its commit): settled elsewhere, and
        # announced there.
        if not row["written"] and (row["stored_state"], row["stored_ts"]) != args[4:6]:
            record.settled_elsewhere = True
        if not row["written"] and row["stored_state"] != args[4]:
            log.warning(
                "task %s is stored %s, which is final: its save as %s is not stored",
                task_id,
                pb.TaskState.Name(row["stored_state"]),
                pb.TaskState.Name(args[4]),
            )
        if not row["created"]:  # the configs every process changes, as of this save
            self._answered_configs(record, row)
        record.push_as_of = saved_status
        record.loaded_as = (args[4], args[5])  # (state, ts) as stored

    async def replace(self, record: TaskRecord) -> bool:
        task = record.task
        if record.loaded_as is None:  # not read from this database: nothing to compare
            await self.save(record)
            return True
        summary = TaskSummary.of(task)
        saved_status = status_key(task)
        record.push_as_of = None
        keys = self._pending.pop(task.id, [])
        replaced = False
        try:
            rows = await self._fetch(
                _REPLACE,
                task.id,
                record.owner.workspace,
                record.owner.name,
                summary.state,
                _clamp(summary.timestamp_ns),
                task.SerializeToString(),
                record.loaded_as[0],
                record.loaded_as[1],
                self.replica,
                self._db_now(),
                summary.state not in ACTIVE,
                self._db_time(summary.timestamp_ns),
                [k[0] for k in keys],
                [k[1] for k in keys],
                summary.state not in _EVENTS_KEPT,
            )
            row = rows[0]
            replaced = bool(row["replaced"])
        finally:
            if keys and not replaced:  # the next save of the task writes them
                self._pending.setdefault(task.id, []).extend(keys)
        if not replaced:
            return False
        self._answered_configs(record, row)
        record.push_as_of = saved_status
        record.loaded_as = (summary.state, _clamp(summary.timestamp_ns))
        return True

    def _answered_configs(self, record: TaskRecord, row: asyncpg.Record) -> None:
        """The push configs a save answered, into the record."""
        configs, opened = self._open_configs(record.task.id, row["configs"], row["versions"])
        record.push_configs[:] = configs
        record.push_versions.clear()
        record.push_versions.update(opened)

    # --- push configs: rows any process changes ----------------------------------------

    async def add_push_config(
        self,
        owner: Caller,
        task_id: str,
        config: pb.TaskPushNotificationConfig,
        version: str,
        most: int,
    ) -> PushAdded:
        sealed = self.box.seal_push_config(config, keep_sealed=False).SerializeToString()
        with self._database_call():
            pool = await self._ready()
            async with pool.acquire(timeout=self.acquire_timeout_s) as conn, conn.transaction():
                # The task's row lock orders the config changes of one task across every
                # process, so the count below sees every committed one (the cap holds).
                found = await conn.fetchval(
                    "SELECT 1 FROM a2a_tasks WHERE task_id = $1 AND workspace = $2"
                    " AND caller = $3 FOR NO KEY UPDATE",
                    task_id,
                    owner.workspace,
                    owner.name,
                )
                if found is None:
                    return "missing"
                held = await conn.fetchrow(
                    "SELECT count(*) AS n, coalesce(max(position) + 1, 0) AS next,"
                    " coalesce(bool_or(config_id = $2), false) AS replacing"
                    " FROM a2a_push_configs WHERE task_id = $1",
                    task_id,
                    config.id,
                )
                assert held is not None  # an aggregate always answers one row
                if not held["replacing"] and held["n"] >= most:
                    return "full"
                await conn.execute(_PUT_PUSH, task_id, held["next"], config.id, version, sealed)
            return "stored"

    async def remove_push_config(self, owner: Caller, task_id: str, config_id: str) -> None:
        await self._fetch(
            "DELETE FROM a2a_push_configs p USING a2a_tasks t"
            " WHERE p.task_id = $1 AND p.config_id = $2 AND t.task_id = p.task_id"
            " AND t.workspace = $3 AND t.caller = $4",
            task_id, config_id, owner.workspace, owner.name,
        )  # fmt: skip

    async def read_push_configs(self, task_id: str) -> list[StoredPush]:
        stored: list[StoredPush] = []
        rows = await self._fetch(_READ_PUSH, task_id)
        ahead = self._status_to_db()
        for data, version, added_ns in rows:
            config = self._open(task_id, data)
            if config is not None:  # when it was added, on this host's clock
                stored.append(StoredPush(config, version, added_ns and added_ns - ahead))
        return stored

    # --- run leases -----------------------------------------------------------------

    def _db_now(self) -> int:
        """The database's time now, in ns (leases are on its clock, not this host's)."""
        return self._ticks() + self._db_offset

    def _db_time(self, wall_ns: int) -> int:
        """``wall_ns``, a status time this host's wall clock stamped, on the database's
        clock, where push configs' ``added_ns`` are (so a config added on a replica whose
        clock is off still gets the runner's next status change, and none before it)."""
        return _clamp(wall_ns + self._status_to_db())

    def _status_to_db(self) -> int:
        """What moves a status time of this host onto the database's clock: the latest
        it may stand for there (stamped to the millisecond, rounded down, and the offset
        known to half a round trip), so a config added before a status change always
        counts as added by it (one added within that margin after it does too: the
        webhook gets the status current when it was registered, never misses one)."""
        return self._db_now() - time.time_ns() + _STAMP_NS + self._db_error

    def _lease_until(self) -> int:
        return self._db_now() + int(self.lease_s * 1e9)

    async def _read_db_offset(self, conn: asyncpg.Connection | PoolConnectionProxy) -> None:
        """Keep the database's time minus this process's ticks (the middle of the round
        trip; its error is half of it, nothing next to a lease)."""
        before = self._ticks()
        db_ns = await conn.fetchval(f"SELECT {_DB_NOW_SQL}")
        after = self._ticks()
        self._db_offset = int(db_ns) - (before + after) // 2
        self._db_error = (after - before) // 2 + 1

    async def _renew_leases(self) -> None:
        """Every third of the lease: extend the leases of the runs saved submitted or
        working by this process (until a later save settles them). Whatever one round
        raises, the next one runs: were this task to end, every other process would
        fail this one's runs "server restarted" a lease later."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self.renew_leases()
                await self.prune_events()
                await self._check_listener()
            except Exception:
                log.exception("lease renewal failed unexpectedly (retried next round)")

    async def renew_leases(self) -> None:
        """One renewal (a failure is logged: the next one retries)."""
        if not self._leased:
            return
        try:
            await self._ready()  # the database's time is known
            await self._fetch(
                "WITH c AS (UPDATE a2a_contexts SET lease_until = $1"
                " WHERE runner = $2 AND task_id = ANY($3::text[]))"
                " UPDATE a2a_tasks SET lease_until = $1"
                " WHERE runner = $2 AND task_id = ANY($3::text[])",
                self._lease_until(),
                self.replica,
                list(self._leased),
            )
        except (StoreUnavailable, *_DB_ERRORS) as exc:
            if not _outage(exc):
                log.warning("could not renew run leases: %s", _why(exc))

    # --- events across processes ------------------------------------------------------

    def log_event(self, task_id: str, event: pb.StreamResponse, state: int | None) -> int | None:
        seq = self._seq.get(task_id)
        if seq is None:
            return None  # not a run of this process
        seq += 1
        if state is not None and state not in ACTIVE:
            self._seq.pop(task_id, None)  # the run's last event (settled or interrupted)
        else:
            self._seq[task_id] = seq
        self._outbox.append((task_id, seq, event.SerializeToString()))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._write_events(), name="a2a-pg-events"
            )
        return seq

    async def _write_events(self) -> None:
        """Write what the outbox holds, a batch per statement, one statement at a time
        (so a task's events are committed in their order), with one NOTIFY per task.
        A batch whose write fails is written again after each of
        :data:`.task_store.STORE_RETRY_PAUSES_S` (a lost event would stop every follower
        of its task at the gap), then dropped; during an outage, until the database is
        back, while the outbox holds at most :data:`OUTAGE_EVENTS_KEPT_BYTES` and the
        store is not closing."""
        tries = 0
        while self._outbox:
            batch = self._outbox[:_EVENT_BATCH]  # new events are only ever appended
            try:
                await self._fetch(
                    _LOG_EVENTS,
                    [b[0] for b in batch],
                    [b[1] for b in batch],
                    [b[2] for b in batch],
                )
            except _DB_ERRORS as exc:
                if (
                    _outage(exc)
                    and self._writer is asyncio.current_task()  # (aclose takes it)
                    and sum(len(b[2]) for b in self._outbox) <= OUTAGE_EVENTS_KEPT_BYTES
                ):
                    await asyncio.sleep(OUTAGE_EVENTS_RETRY_S)
                    continue
                if tries < len(STORE_RETRY_PAUSES_S):
                    pause = STORE_RETRY_PAUSES_S[tries]
                    tries += 1
                    if not _outage(exc):
                        log.warning(
                            "%d stream events not logged yet (trying again in %gs): %s",
                            len(batch),
                            pause,
                            _why(exc),
                        )
                    await asyncio.sleep(pause)
                    continue
                log.warning("%d stream events not logged: %s", len(batch), _why(exc))
            tries = 0
            del self._outbox[: len(batch)]

    async def prune_events(self) -> None:
        """Remove the events of tasks settled more than ``event_keep_s`` ago, by the
        database's clock (the row's ``settled_ns``, noted by the database): neither a
        process whose clock runs ahead nor a runner whose clock is behind (its status
        times, ``ts``, look old) prunes the events of a task settled a moment ago, which
        late subscribers elsewhere still read."""
        cutoff = self._db_now() - int(self.event_keep_s * 1e9)
        try:
            await self._fetch(
                "DELETE FROM a2a_events e USING a2a_tasks t WHERE e.task_id = t.task_id"
                " AND t.state <> ALL($1::smallint[]) AND coalesce(t.settled_ns, t.ts) < $2",
                sorted(_EVENTS_KEPT),
                cutoff,
            )
        except _DB_ERRORS as exc:
            if not _outage(exc):
                log.warning("could not prune stream events: %s", _why(exc))

    def follow(
        self,
        task_id: str,
        after_seq: int,
        deliver: Callable[[list[pb.StreamResponse] | None, int], bool],
    ) -> None:
        if task_id in self._follows:
            return
        poke = asyncio.Event()
        self._delivered[task_id] = after_seq
        follower = asyncio.get_running_loop().create_task(
            self._follow(task_id, after_seq + 1, deliver, poke), name=f"a2a-follow-{task_id}"
        )
        self._follows[task_id] = (poke, follower)

    def _on_event(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        followed = self._follows.get(payload) if isinstance(payload, str) else None
        if followed is not None:
            followed[0].set()

    async def _follow(
        self,
        task_id: str,
        next_seq: int,
        deliver: Callable[[list[pb.StreamResponse] | None, int], bool],
        poke: asyncio.Event,
    ) -> None:
        """Read the task's events from ``next_seq`` on whenever a NOTIFY names it
        (and once a lease, to notice a run whose process died, or that nobody here
        listens any more: ``deliver`` of no events is False); once handed over
        (:meth:`hand_over`), up to the last event before this process's run."""
        try:
            while True:
                poke.clear()
                last = self._last.get(task_id, _INT64_MAX)
                if next_seq > last:
                    return
                rows = await self._fetch(
                    "SELECT seq, event FROM a2a_events WHERE task_id = $1 AND seq >= $2"
                    " AND seq <= $4 ORDER BY seq LIMIT $3",
                    task_id,
                    next_seq,
                    _EVENT_BATCH,
                    last,
                )
                first_seq = next_seq
                events: list[pb.StreamResponse] = []
                for seq, data in rows:
                    if seq != next_seq:
                        break  # not committed yet: its NOTIFY follows
                    events.append(pb.StreamResponse.FromString(data))
                    next_seq += 1
                if events:
                    self._delivered[task_id] = next_seq - 1
                    if not deliver(events, first_seq):
                        return
                if len(events) == _EVENT_BATCH or next_seq > self._last.get(task_id, _INT64_MAX):
                    continue
                try:
                    await asyncio.wait_for(poke.wait(), self.lease_s)
                except TimeoutError:
                    if not deliver([], next_seq):  # nobody here listens any more
                        return
                    if not await self._still_running(task_id):
                        deliver(None, 0)
                        return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not _outage(exc):  # (an outage ended the streams that followed it)
                log.warning("following task %s's events failed: %s", task_id, _why(exc))
            deliver(None, 0)
        finally:
            followed = self._follows.get(task_id)
            if followed is not None and followed[1] is asyncio.current_task():
                del self._follows[task_id]
                self._delivered.pop(task_id, None)

    async def hand_over(self, task_id: str) -> int | None:
        followed = self._follows.get(task_id)
        last = self._seq.get(task_id)  # the claim's: its run's events follow
        if followed is None or last is None:
            return None
        poke, follower = followed
        self._last[task_id] = last
        poke.set()  # the events before the claim are read now, not at the next NOTIFY
        try:
            # Those not committed yet (the other process's last writes) are announced
            # as usual; their writes are bounded by the same statement bound.
            done, _ = await asyncio.wait({follower}, timeout=self.command_timeout_s)
        except BaseException:
            self._last.pop(task_id, None)  # the run does not start: the follow goes on
            raise
        if not done:
            log.warning("task %s: the events logged before its run came here were late", task_id)
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await follower
        self._last.pop(task_id, None)
        return last

    def followed_seq(self, task_id: str) -> int | None:
        return self._delivered.get(task_id) if task_id in self._follows else None

    async def read_events(
        self, task_id: str, after_seq: int, upto_seq: int, owner: Caller | None = None
    ) -> list[pb.StreamResponse]:
        """The logged events in the range, those of a run here still in the outbox
        included (taken before the read: one written meanwhile is in the read)."""
        queued = {
            seq: data
            for queued_id, seq, data in self._outbox
            if queued_id == task_id and after_seq < seq <= upto_seq
        }
        rows = await self._fetch(
            "SELECT seq, event FROM a2a_events WHERE task_id = $1 AND seq > $2 AND seq <= $3"
            " ORDER BY seq",
            task_id,
            after_seq,
            upto_seq,
        )
        found = {int(row[0]): bytes(row[1]) for row in rows}
        events: list[pb.StreamResponse] = []
        seq = after_seq + 1
        while seq <= upto_seq and (data := found.get(seq) or queued.get(seq)) is not None:
            events.append(pb.StreamResponse.FromString(data))
            seq += 1
        return events

    def start_event_log(self, owner: Caller, task_id: str) -> int | None:
        return self._seq.get(task_id)  # a run here: its last event's number

    async def event_bounds(self, owner: Caller, task_id: str) -> tuple[int, int] | None:
        rows = await self._fetch(
            "SELECT min(e.seq), max(e.seq), max(t.event_seq) FROM a2a_tasks t"
            " LEFT JOIN a2a_events e ON e.task_id = t.task_id WHERE t.task_id = $1",
            task_id,
        )
        if not rows:
            return None
        first, last, stored = rows[0]
        queued = [seq for queued_id, seq, _ in self._outbox if queued_id == task_id]
        last = max(last or 0, stored or 0, *queued, self._seq.get(task_id) or 0)
        if first is None:
            first = min(queued) if queued else last + 1
        return (int(first), int(last))

    async def _still_running(self, task_id: str) -> bool:
        """Whether the task is interrupted or its run's lease is held."""
        rows = await self._fetch(
            "SELECT state, runner, lease_until FROM a2a_tasks WHERE task_id = $1", task_id
        )
        if not rows:
            return False
        state, runner, lease_until = rows[0]
        if state in INTERRUPTED:
            return True
        return state in ACTIVE and bool(runner) and lease_until > self._db_now()

    # --- retention ---------------------------------------------------------------------

    async def expire(self, cutoff_ns: int, limit: int, *, files: bool = False) -> int:
        """Remove up to ``limit`` settled tasks whose status is older than the cutoff,
        oldest first, with their push configs, retry keys and events (with ``files``
        also their inbox files). One replica at a time: a batch another replica is
        doing makes this one remove nothing. How many were removed."""
        try:
            with self._database_call():
                pool = await self._ready()
                async with (
                    pool.acquire(timeout=self.acquire_timeout_s) as conn,
                    conn.transaction(),
                ):
                    locked = await conn.fetchval(
                        "SELECT pg_try_advisory_xact_lock($1)", RETENTION_LOCK
                    )
                    if not locked:
                        return 0
                    rows = await conn.fetch(_EXPIRE, _clamp(cutoff_ns), limit, files)
        except (StoreUnavailable, *_DB_ERRORS) as exc:  # the next pass tries again
            if not _outage(exc):
                log.warning("task retention skipped a pass: %s", _why(exc))
            return 0
        if files:
            # A caller without a workspace (anonymous) saved its files in the first one.
            removed = [
                (Path(r["workspace"] or self.box.workspace), pb.Task.FromString(r["task"]))
                for r in rows
            ]

            def unlink() -> None:
                for workspace, task in removed:
                    remove_inbox_files(workspace, task)

            await asyncio.to_thread(unlink)
        return len(rows)

    # --- one run per context across processes ---------------------------------------

    async def claim_context(
        self,
        owner: Caller,
        context_id: str,
        task_id: str,
        loaded_as: tuple[int, int] | None = None,
    ) -> bool:
        """Claim the context for ``task_id``: taken when no claim exists, the existing
        one is this process's for this task, or its lease expired (its process died);
        never for a task stored settled (another process cancelled it after this one
        read it) or no longer stored as ``loaded_as`` (a turn of it ran elsewhere),
        nor over another live process's claim of the same task (its run)."""
        await self._ready()  # the database's time is known
        state, ts = loaded_as if loaded_as is not None else (None, None)
        rows = await self._fetch(
            _CLAIM, owner.workspace, owner.name, context_id, task_id, self.replica,
            self._lease_until(), self._db_now(), state, ts,
        )  # fmt: skip
        if rows:
            self._leased.add(task_id)
            # The run's events follow (a follow of the task here hands over: hand_over).
            self._seq[task_id] = int(rows[0]["event_seq"] or 0)
        return bool(rows)

    async def release_context(self, owner: Caller, context_id: str, task_id: str) -> None:
        self._leased.discard(task_id)
        self._seq.pop(task_id, None)
        await self._fetch(
            "DELETE FROM a2a_contexts"
            " WHERE workspace = $1 AND caller = $2 AND context_id = $3 AND task_id = $4",
            owner.workspace, owner.name, context_id, task_id,
        )  # fmt: skip

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

    # --- cancellation across processes ----------------------------------------------

    def on_cancel_request(self, handler: Callable[[str], None]) -> None:
        self._cancel_handler = handler

    async def request_cancel(self, task_id: str) -> bool:
        await self._fetch(_REQUEST_CANCEL, CANCEL_CHANNEL, task_id)
        return True

    def _on_cancel(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        handler = self._cancel_handler
        if handler is not None and isinstance(payload, str) and valid_id(payload):
            handler(payload)

    # --- messageId retry keys --------------------------------------------------------

    def find_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        return self._recent.get((owner, message_id, fingerprint))

    async def lookup_message(self, owner: Caller, message_id: str, fingerprint: str) -> str | None:
        known = self._recent.get((owner, message_id, fingerprint))
        if known is not None:
            return known
        rows = await self._fetch(
            _FIND_MESSAGE, owner.workspace, owner.name, message_id, fingerprint
        )
        if not rows:
            return None
        task_id = str(rows[0][0])
        self._keep(owner, message_id, fingerprint, task_id)
        return task_id

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        self._keep(owner, message_id, fingerprint, task_id)
        self._pending.setdefault(task_id, []).append((message_id, fingerprint))

    def _keep(self, owner: Caller, message_id: str, fingerprint: str, task_id: str) -> None:
        size = len(message_id) + len(fingerprint) + len(task_id) + _RETRY_KEY_OVERHEAD
        self._recent.put((owner, message_id, fingerprint), task_id, size)


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


def _why(exc: BaseException) -> str:
    """An error's reason without the URL (asyncpg's messages name host and user at
    most; the text is cut so nothing long is echoed)."""
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text[:300]}"
