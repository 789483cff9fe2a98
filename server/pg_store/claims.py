"""One run per context across processes, and the runs' leases."""

from __future__ import annotations

import asyncio
import logging

from a2a_gateway.protocol.context import Caller

from .connection import (
    SETTLED_SQL,
    PgConnection,
    StoreUnavailable,
    outage,
    why,
)
from .errors import DB_ERRORS

log = logging.getLogger(__package__)  # one logger for the package, named as before

# Not for a task another process settled since it was read (a CancelTask there), nor,
# for a task read as ($8 state, $9 ts), one stored otherwise now (a turn of it ran
# elsewhere since: a run from the task as read would drop that turn). A live claim is
# taken over only by its own process (one whose release was lost): the same task's
# claim held by another process is that process's run of it (a continuation there
# since this one read the task), not one to run twice.
_CLAIM = f"""
INSERT INTO a2a_contexts AS c(workspace, caller, context_id, task_id, runner, lease_until)
SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint
WHERE NOT EXISTS (SELECT 1 FROM a2a_tasks t WHERE t.task_id = $4 AND t.{SETTLED_SQL})
  AND ($8::smallint IS NULL OR EXISTS (SELECT 1 FROM a2a_tasks t WHERE t.task_id = $4
                                       AND t.state = $8 AND t.ts = $9::bigint))
ON CONFLICT (workspace, caller, context_id) DO UPDATE SET task_id = excluded.task_id,
  runner = excluded.runner, lease_until = excluded.lease_until, cancel_requested = false
  WHERE c.lease_until < $7 OR (c.task_id = excluded.task_id AND c.runner = excluded.runner)
RETURNING task_id, (SELECT event_seq FROM a2a_tasks WHERE task_id = $4) AS event_seq
"""


class PgContextClaims(PgConnection):
    """One run per context across processes, and the runs' leases."""

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
            stored_seq = rows[0]["event_seq"]
            self._seq[task_id] = int(stored_seq or 0)
            if stored_seq is None:  # a new task: no other process can know it yet
                self._held.setdefault(task_id, [])
        return bool(rows)

    async def release_context(self, owner: Caller, context_id: str, task_id: str) -> None:
        self._leased.discard(task_id)
        self._seq.pop(task_id, None)
        self._held.pop(task_id, None)
        await self._fetch(
            "DELETE FROM a2a_contexts"
            " WHERE workspace = $1 AND caller = $2 AND context_id = $3 AND task_id = $4",
            owner.workspace, owner.name, context_id, task_id,
        )  # fmt: skip

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
        except (StoreUnavailable, *DB_ERRORS) as exc:
            if not outage(exc):
                log.warning("could not renew run leases: %s", why(exc))
