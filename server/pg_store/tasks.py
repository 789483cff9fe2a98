"""Tasks as rows: load, list, save, replace, expire."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import asyncpg

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from ..file_store import remove_inbox_files
from ..ids import valid_id
from ..task_states import ACTIVE
from ..task_store import (
    UNSTORED,
    Listing,
    StatusKey,
    TaskFilter,
    TaskRecord,
    TaskSummary,
    Window,
    status_key,
)
from .connection import (
    EVENTS_KEPT,
    RETENTION_LOCK,
    SETTLED_SQL,
    PgConnection,
    Save,
    StoreUnavailable,
    filter_conditions,
    outage,
    unnest_params,
    why,
)
from .db_clock import DB_NOW_SQL, INT64_MAX, clamp
from .errors import DB_ERRORS

log = logging.getLogger(__package__)  # one logger for the package, named as before


# A stored terminal state is final: no save replaces it (say, the run of a process
# that stalled past its lease settling a task another process already failed "server
# restarted", or a continuation's save landing after a cancel from another process).
#
# The saves waiting at once are one statement (group commit, ``self._saves``): one
# row of ``s`` per save (no task twice), the push configs of the tasks it creates and
# the retry keys flattened, each naming its task. Every part of the statement reads
# the rows as they were before it (a data-modifying CTE's changes are not visible to
# the rest): ``b`` is the row each save met (none: it creates the task). The rows of
# a2a_tasks are read by scalar subqueries, one primary-key probe each, never a join:
# the generic plan guesses the arrays' length, and a join the planner may turn into a
# hash join scans the whole table (measured: 4x the statement's cost at 3,000 rows).
# The arrays are read through sub-selects (``unnest_params``) for the same plan.
_SAVES = unnest_params(
    *("$1::text[]", "$2::text[]", "$3::text[]", "$4::text[]", "$5::smallint[]"),
    *("$6::bigint[]", "$7::bytea[]", "$8::text[]", "$9::bigint[]", "$10::boolean[]"),
    *("$11::boolean[]", "$12::bigint[]", "$13::bigint[]", "$14::boolean[]"),
)
_CONFIGS = unnest_params(
    "$15::text[]", "$16::integer[]", "$17::text[]", "$18::text[]", "$19::bytea[]"
)
_KEYS = unnest_params("$20::text[]", "$21::text[]", "$22::text[]")
_SAVE = f"""
WITH s AS (
  SELECT * FROM {_SAVES} WITH ORDINALITY
  AS s(task_id, workspace, caller, context_id, state, ts, task, runner, lease_until, held,
    settles, event_seq, as_of, settled_now, n)),
b AS (
  SELECT s.n, s.task_id, s.as_of,
    (SELECT a.state FROM a2a_tasks a WHERE a.task_id = s.task_id) AS stored_state,
    (SELECT a.ts FROM a2a_tasks a WHERE a.task_id = s.task_id) AS stored_ts
  FROM s),
t AS (
  INSERT INTO a2a_tasks AS a(task_id, workspace, caller, context_id, state, ts, task,
    runner, lease_until, event_seq, settled_ns)
  SELECT task_id, workspace, caller, context_id, state, ts, task, runner, lease_until,
    coalesce(event_seq, 0), CASE WHEN settled_now THEN {DB_NOW_SQL} END
  FROM s
  ON CONFLICT (task_id) DO UPDATE SET workspace = excluded.workspace,
    caller = excluded.caller, context_id = excluded.context_id, state = excluded.state,
    ts = excluded.ts, task = excluded.task, settled_ns = excluded.settled_ns,
    (runner, lease_until, event_seq) = (
      SELECT CASE WHEN s.held THEN a.runner ELSE s.runner END,
        CASE WHEN s.held THEN a.lease_until ELSE s.lease_until END,
        coalesce(s.event_seq, a.event_seq)
      FROM s WHERE s.task_id = excluded.task_id)
  WHERE NOT a.{SETTLED_SQL}
  RETURNING task_id),
push AS (
  INSERT INTO a2a_push_configs(task_id, position, config_id, version, config)
  SELECT c.task_id, c.position, c.id, c.version, c.config
  FROM {_CONFIGS}
    AS c(task_id, position, id, version, config)
  JOIN b ON b.task_id = c.task_id AND b.stored_state IS NULL
  ON CONFLICT DO NOTHING),
settled AS (
  DELETE FROM a2a_contexts c USING s WHERE s.settles AND c.workspace = s.workspace
    AND c.caller = s.caller AND c.context_id = s.context_id AND c.task_id = s.task_id),
retry AS (
  INSERT INTO a2a_retry_keys(workspace, caller, message_id, fingerprint, task_id)
  SELECT s.workspace, s.caller, k.message_id, k.fingerprint, k.task_id
  FROM {_KEYS}
    AS k(task_id, message_id, fingerprint)
  JOIN s ON s.task_id = k.task_id
  ON CONFLICT DO NOTHING)
SELECT b.task_id, b.stored_state IS NULL AS created,
  b.task_id IN (SELECT task_id FROM t) AS written, b.stored_state, b.stored_ts,
  ARRAY(SELECT p.config FROM a2a_push_configs p WHERE p.task_id = b.task_id
        AND p.added_ns <= b.as_of ORDER BY p.position) AS configs,
  ARRAY(SELECT p.version FROM a2a_push_configs p WHERE p.task_id = b.task_id
        AND p.added_ns <= b.as_of ORDER BY p.position) AS versions
FROM b ORDER BY b.n
"""

# One save alone (see _SAVE): $1-$7 the row, $8-$10 the push configs of a task it
# creates, $11-$12 the retry keys, $13-$14 the lease, $15 held elsewhere, $16 settles (the
# claim released), $17 event_seq, $18 the configs' time, $19 settled now.
_SAVE_ONE = f"""
WITH t AS (
  INSERT INTO a2a_tasks(task_id, workspace, caller, context_id, state, ts, task, runner,
    lease_until, event_seq, settled_ns)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $13, $14, coalesce($17, 0),
    CASE WHEN $19 THEN {DB_NOW_SQL} END)
  ON CONFLICT (task_id) DO UPDATE SET workspace = excluded.workspace,
    caller = excluded.caller, context_id = excluded.context_id, state = excluded.state,
    ts = excluded.ts, task = excluded.task,
    runner = CASE WHEN $15 THEN a2a_tasks.runner ELSE excluded.runner END,
    lease_until = CASE WHEN $15 THEN a2a_tasks.lease_until ELSE excluded.lease_until END,
    event_seq = coalesce($17, a2a_tasks.event_seq), settled_ns = excluded.settled_ns
  WHERE NOT a2a_tasks.{SETTLED_SQL}
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
    settled_ns = CASE WHEN $15 THEN {DB_NOW_SQL} END
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

_LOAD = """
SELECT t.task,
  ARRAY(SELECT p.config FROM a2a_push_configs p WHERE p.task_id = t.task_id
        ORDER BY p.position) AS configs,
  ARRAY(SELECT p.version FROM a2a_push_configs p WHERE p.task_id = t.task_id
        ORDER BY p.position) AS versions,
  t.runner, t.lease_until, t.event_seq, t.state, t.ts
FROM a2a_tasks t WHERE t.task_id = $1 AND t.workspace = $2 AND t.caller = $3
"""

# A retention batch: the oldest settled tasks before the cutoff (rows a save holds
# are left for the next batch), with their events and any claim left; push configs
# and retry keys go with the task row (ON DELETE CASCADE).
_EXPIRE = f"""
WITH doomed AS (
  SELECT task_id FROM a2a_tasks WHERE {SETTLED_SQL} AND ts < $1
  ORDER BY ts LIMIT $2 FOR UPDATE SKIP LOCKED),
events AS (DELETE FROM a2a_events e USING doomed d WHERE e.task_id = d.task_id),
claims AS (DELETE FROM a2a_contexts c USING doomed d WHERE c.task_id = d.task_id)
DELETE FROM a2a_tasks t USING doomed d WHERE t.task_id = d.task_id
RETURNING t.workspace, CASE WHEN $3 THEN t.task END AS task
"""


class PgTaskRows(PgConnection):
    """Tasks as rows: load, list, save, replace, expire."""

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

    async def listing(self, owner: Caller, flt: TaskFilter, window: Window) -> Listing:
        cursor, limit, task_ids = window
        params: list[Any] = [owner.workspace, owner.name]
        conditions: list[str] = []
        filter_conditions(flt, conditions, params)
        where = "workspace = $1 AND caller = $2 " + " ".join(conditions)
        page = [f"SELECT task_id, context_id, state, ts FROM a2a_tasks WHERE {where}"]
        if cursor is not None:
            params.extend((clamp(cursor[0]), cursor[1]))
            page.append(f"AND (ts, task_id) < (${len(params) - 1}, ${len(params)})")
        params.append(min(limit, INT64_MAX))
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
        """The pool's connections (open, in use, the most) and the LISTEN reconnects.
        The connections the group commits keep between statements count as open, not
        in use, while they wait for the next (the pool counts them taken)."""
        pool = self._pool
        size = pool.get_size() if pool is not None else 0
        idle = pool.get_idle_size() if pool is not None else 0
        return {
            "pool_size": size,
            "pool_in_use": max(0, size - idle - len(self._kept)),
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
            # Stored while its run goes on: another process may follow it from the
            # row's event_seq on, so its events are logged from now on.
            self._unhold(task_id)
        else:
            self._leased.discard(task_id)
        save = Save(
            task_id,
            owner.workspace,
            owner.name,
            summary.context_id,
            summary.state,
            clamp(summary.timestamp_ns),
            data,
            runner,
            lease_until,
            record.held_elsewhere,
            summary.state not in ACTIVE,  # settles: the claim is released
            event_seq,
            self._db_time(summary.timestamp_ns),  # the configs it answers
            summary.state not in EVENTS_KEPT,  # settled (its time noted)
            [c.id for c in sealed],
            [versions.get(c.id, "") for c in sealed],
            [c.SerializeToString() for c in sealed],
            keys,
        )
        # Saves of one task are chained: each statement starts once the one before
        # has ended, so they land in call order (on separate pooled connections they
        # could overtake each other: a background save of WORKING still waiting for a
        # new connection while the run's FAILED found an open one). Each runs in a
        # task of its own, so a cancelled save still lands in its place and the chain
        # never waits on a statement nobody runs; different tasks stay concurrent.
        before = self._saving.get(task_id)
        write = asyncio.get_running_loop().create_task(
            self._write(before, record, save, unstored, saved_status),
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
        save: Save,
        unstored: bool,
        saved_status: StatusKey,
    ) -> None:
        """One save, once the task's previous save ended. That one is bounded itself (a
        pooled connection within ``acquire_timeout_s``, the statement within
        ``command_timeout_s``); should it take longer still (waiting in turn on its own
        predecessor), this one goes ahead rather than wait without end."""
        task_id = save.task_id
        if before is not None and not before.done():
            await asyncio.wait({before}, timeout=self.acquire_timeout_s + self.command_timeout_s)
        try:
            row = await self._saves.call(save)
        except BaseException:
            if save.keys:  # the next save of the task writes them
                self._pending.setdefault(task_id, []).extend(save.keys)
            if unstored:  # a failed statement created nothing
                record.push_as_of = UNSTORED
            raise
        # Not written, and not this very status written before (a write tried again
        # after an error that came after its commit): settled elsewhere, and
        # announced there.
        if not row["written"] and (row["stored_state"], row["stored_ts"]) != (
            save.state,
            save.ts,
        ):
            record.settled_elsewhere = True
        if not row["written"] and row["stored_state"] != save.state:
            log.warning(
                "task %s is stored %s, which is final: its save as %s is not stored",
                task_id,
                pb.TaskState.Name(row["stored_state"]),
                pb.TaskState.Name(cast("pb.TaskState.ValueType", save.state)),
            )
        if not row["created"]:  # the configs every process changes, as of this save
            self._answered_configs(record, row)
        record.push_as_of = saved_status
        record.loaded_as = (save.state, save.ts)  # (state, ts) as stored

    async def _store_save(self, s: Save) -> asyncpg.Record:
        """One save alone (group commit: ``self._saves``): its statement's row."""
        keys = s.keys
        rows = await self._fetch_kept(
            _SAVE_ONE, *s[:7], s.config_ids, s.config_versions, s.configs,
            [k[0] for k in keys], [k[1] for k in keys], s.runner, s.lease_until, s.held,
            s.settles, s.event_seq, s.as_of, s.settled_now,
        )  # fmt: skip
        return rows[0]

    async def _store_saves(self, saves: list[Save]) -> list[asyncpg.Record]:
        """One statement for saves of different tasks (group commit: ``self._saves``):
        their rows of the answer, in order."""
        configs = [
            (s.task_id, n, config_id, version, config)
            for s in saves
            for n, (config_id, version, config) in enumerate(
                zip(s.config_ids, s.config_versions, s.configs, strict=True)
            )
        ]
        keys = [(s.task_id, message_id, fp) for s in saves for message_id, fp in s.keys]
        return await self._fetch_kept(
            _SAVE,
            *zip(*(s[:14] for s in saves), strict=True),
            *(zip(*configs, strict=True) if configs else ((), (), (), (), ())),
            *(zip(*keys, strict=True) if keys else ((), (), ())),
        )

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
                clamp(summary.timestamp_ns),
                task.SerializeToString(),
                record.loaded_as[0],
                record.loaded_as[1],
                self.replica,
                self._db_now(),
                summary.state not in ACTIVE,
                self._db_time(summary.timestamp_ns),
                [k[0] for k in keys],
                [k[1] for k in keys],
                summary.state not in EVENTS_KEPT,
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
        record.loaded_as = (summary.state, clamp(summary.timestamp_ns))
        return True

    def _answered_configs(self, record: TaskRecord, row: asyncpg.Record) -> None:
        """The push configs a save answered, into the record."""
        configs, opened = self._open_configs(record.task.id, row["configs"], row["versions"])
        record.push_configs[:] = configs
        record.push_versions.clear()
        record.push_versions.update(opened)

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
                    rows = await conn.fetch(_EXPIRE, clamp(cutoff_ns), limit, files)
        except (StoreUnavailable, *DB_ERRORS) as exc:  # the next pass tries again
            if not outage(exc):
                log.warning("task retention skipped a pass: %s", why(exc))
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
