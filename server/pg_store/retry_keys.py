"""The messageId retry keys (``a2a_retry_keys``)."""

from __future__ import annotations

import asyncpg

from a2a_gateway.protocol.context import Caller

from .connection import (
    RETRY_KEY_OVERHEAD,
    Lookup,
    PgConnection,
    unnest_params,
)

_FIND_MESSAGE = (
    "SELECT task_id FROM a2a_retry_keys"
    " WHERE workspace = $1 AND caller = $2 AND message_id = $3 AND fingerprint = $4"
)


# New messages' retry lookups and, for each whose key names no task, the claim of its
# context for the new task (no row has that id yet: nothing to check of it), in one
# statement for the lookups waiting at once (group commit, ``self._lookups``; never
# one context twice in a statement). The key is read by a scalar subquery (a
# primary-key probe, never a join) and the arrays through sub-selects: see _SAVE in
# tasks.py.
_LOOKUPS = unnest_params(
    "$1::text[]", "$2::text[]", "$3::text[]", "$4::text[]", "$5::text[]", "$6::text[]"
)
_LOOKUP_OR_CLAIM = f"""
WITH s AS (
  SELECT * FROM {_LOOKUPS} WITH ORDINALITY
  AS s(workspace, caller, context_id, task_id, message_id, fingerprint, n)),
r AS (
  SELECT s.*, (SELECT k.task_id FROM a2a_retry_keys k WHERE k.workspace = s.workspace
               AND k.caller = s.caller AND k.message_id = s.message_id
               AND k.fingerprint = s.fingerprint) AS retried
  FROM s),
claimed AS (
  INSERT INTO a2a_contexts AS c(workspace, caller, context_id, task_id, runner, lease_until)
  SELECT r.workspace, r.caller, r.context_id, r.task_id, $7::text, $8::bigint
  FROM r WHERE r.retried IS NULL
  ON CONFLICT (workspace, caller, context_id) DO UPDATE SET task_id = excluded.task_id,
    runner = excluded.runner, lease_until = excluded.lease_until, cancel_requested = false
    WHERE c.lease_until < $9 OR (c.task_id = excluded.task_id AND c.runner = excluded.runner)
  RETURNING task_id)
SELECT r.retried, r.task_id IN (SELECT task_id FROM claimed) AS claimed FROM r ORDER BY r.n
"""


# One lookup alone (see _LOOKUP_OR_CLAIM).
_LOOKUP_OR_CLAIM_ONE = """
WITH retried AS (
  SELECT task_id FROM a2a_retry_keys
  WHERE workspace = $1 AND caller = $2 AND message_id = $8 AND fingerprint = $9),
claimed AS (
  INSERT INTO a2a_contexts AS c(workspace, caller, context_id, task_id, runner, lease_until)
  SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint
  WHERE NOT EXISTS (SELECT 1 FROM retried)
  ON CONFLICT (workspace, caller, context_id) DO UPDATE SET task_id = excluded.task_id,
    runner = excluded.runner, lease_until = excluded.lease_until, cancel_requested = false
    WHERE c.lease_until < $7 OR (c.task_id = excluded.task_id AND c.runner = excluded.runner)
  RETURNING 1)
SELECT (SELECT task_id FROM retried LIMIT 1) AS retried, EXISTS (SELECT 1 FROM claimed) AS claimed
"""


class PgRetryKeys(PgConnection):
    """The messageId retry keys (``a2a_retry_keys``)."""

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

    async def lookup_or_claim(
        self, owner: Caller, message_id: str, fingerprint: str, context_id: str, task_id: str
    ) -> tuple[str | None, bool]:
        """The retry lookup (``lookup_message``) and, when no task has the key, the
        claim of the context for the new task ``task_id``, in one round trip."""
        known = self.find_message(owner, message_id, fingerprint)
        if known is not None:
            return known, False
        await self._ready()  # the database's time is known
        found, claimed = await self._lookups.call(
            Lookup(owner.workspace, owner.name, context_id, task_id, message_id, fingerprint)
        )
        if found is not None:
            self._keep(owner, message_id, fingerprint, str(found))
            return str(found), False
        if claimed:
            self._leased.add(task_id)
            self._seq[task_id] = 0  # a new task: its run's events are numbered from 1
            self._held.setdefault(task_id, [])  # and no other process can know it yet
        return None, bool(claimed)

    async def _lookup_or_claim(self, one: Lookup) -> asyncpg.Record:
        """One lookup alone: its statement's row."""
        rows = await self._fetch_kept(
            _LOOKUP_OR_CLAIM_ONE, one.workspace, one.caller, one.context_id, one.task_id,
            self.replica, self._lease_until(), self._db_now(), one.message_id, one.fingerprint,
        )  # fmt: skip
        return rows[0]

    async def _lookups_or_claims(self, lookups: list[Lookup]) -> list[asyncpg.Record]:
        """One statement for the lookups waiting at once: a row each, in order."""
        return await self._fetch_kept(
            _LOOKUP_OR_CLAIM,
            *zip(*lookups, strict=True),
            self.replica,
            self._lease_until(),
            self._db_now(),
        )

    def remember_message(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str
    ) -> None:
        self._keep(owner, message_id, fingerprint, task_id)
        self._pending.setdefault(task_id, []).append((message_id, fingerprint))

    def _keep(self, owner: Caller, message_id: str, fingerprint: str, task_id: str) -> None:
        size = len(message_id) + len(fingerprint) + len(task_id) + RETRY_KEY_OVERHEAD
        self._recent.put((owner, message_id, fingerprint), task_id, size)
