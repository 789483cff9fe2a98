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
task's. A message that starts a new task is looked up by its retry key and claims
its context in one statement (:meth:`lookup_or_claim`: the claim only when no task
has the key), before the agent's reply hook; a reply (no task) gives the claim back.
So a blocking send that ends at once is two statements: that one, and the save of
the finished task (row, retry key and the claim's release). Both are group commits
(:mod:`.group_commit`): the lookups waiting at once are one statement, and so are the
saves of different tasks (at most two statements of a kind at a time; a call alone
takes its own single-row statement), each call answered once the statement that
carried it committed, so under load a send costs PostgreSQL a fraction of two
statements (docs/performance.md). Their statements run on pooled connections kept
between statements (up to ``(pool_size - 2) // 2`` of them, the rest left to the
other calls; one that fails or that the server closed goes back to the pool), so a
statement takes no connection from the pool and gives none back.

Stream events cross processes through ``a2a_events``: every event of a run of this
process is numbered per task (continuing from the number the task's row holds when
the run claims its context), written in order by one writer task in batches, each
batch with one ``NOTIFY a2a_events`` per task. Not the events of a run of a new task
that nobody can see yet: until a stream here joins it (its events then have numbers
outside this process) or a save stores it while it goes on (another process may then
follow it from the row's ``event_seq``), they are held in memory, numbered; then
written, in order, and the later ones as they come. A run that settles unseen (a
blocking send answered at once) writes none: its row reflects them all, and nobody
had their numbers (a resume point of it gets the flagged snapshot, as on a store of
one process). A row's ``event_seq`` is the number of
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
retry keys remembered for it since its last save; with the saves of other tasks
waiting at once), so it is atomic without a transaction block. The saves of one task
by this process are chained (each statement starts when the task's previous one
ended; a cancelled save still lands in its place), so they land in call order as the
file store's do; different tasks' saves run at once.
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

from .cancel import PgCancelSignals
from .claims import PgContextClaims
from .connection import (
    ACQUIRE_TIMEOUT_S,
    CANCEL_CHANNEL,
    COMMAND_TIMEOUT_S,
    DEFAULT_EVENT_KEEP_S,
    DEFAULT_LEASE_S,
    DEFAULT_POOL_SIZE,
    EVENTS_CHANNEL,
    LISTEN_RETRY_FIRST_S,
    LISTEN_RETRY_MAX_S,
    LISTENER_NAME,
    MIGRATION_LOCK,
    MIGRATIONS,
    OUTAGE_EVENTS_KEPT_BYTES,
    OUTAGE_EVENTS_RETRY_S,
    RETENTION_LOCK,
    SCHEMA_VERSION,
    StoreUnavailable,
    migrate,
)
from .events import PgEventLogs
from .push_configs import PgPushConfigs
from .retry_keys import PgRetryKeys
from .tasks import PgTaskRows


class PostgresTaskStore(
    PgTaskRows,
    PgPushConfigs,
    PgContextClaims,
    PgEventLogs,
    PgCancelSignals,
    PgRetryKeys,
):
    """Tasks as rows of a PostgreSQL database (see the module docstring): the store's
    roles, one module each, over the connection, migrations and LISTEN of
    :class:`~.connection.PgConnection`.

    The pool opens on :meth:`start` (which also migrates the schema), or on first use.
    """


__all__ = [
    "ACQUIRE_TIMEOUT_S",
    "CANCEL_CHANNEL",
    "COMMAND_TIMEOUT_S",
    "DEFAULT_EVENT_KEEP_S",
    "DEFAULT_LEASE_S",
    "DEFAULT_POOL_SIZE",
    "EVENTS_CHANNEL",
    "LISTENER_NAME",
    "LISTEN_RETRY_FIRST_S",
    "LISTEN_RETRY_MAX_S",
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "OUTAGE_EVENTS_KEPT_BYTES",
    "OUTAGE_EVENTS_RETRY_S",
    "RETENTION_LOCK",
    "SCHEMA_VERSION",
    "PostgresTaskStore",
    "StoreUnavailable",
    "migrate",
]
