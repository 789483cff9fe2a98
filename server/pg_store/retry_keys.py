"""The messageId retry keys (``a2a_retry_keys``)."""

from __future__ import annotations

import asyncpg

from a2a_gateway.protocol.context import Caller

from .connection import (
    RETRY_KEY_OVERHEAD,
    Lookup,
    PgConnection,
)

_FIND_MESSAGE = (
    "SELECT task_id FROM a2a_retry_keys"
    " WHERE workspace = $1 AND caller = $2 AND message_id = $3 AND fingerprint = $4"
)


# New messages' retry lookups and, for each whose key names no task, the claim of its
# context for the new task (no row has that id yet: nothing to check of it), in one
# statement for the lookups waiting at once (group commit, ``self._lookups``; never
# one context twice in a statement).
_LOOKUP_OR_CLAIM = """
WITH s AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
    $6::text[]) WITH ORDINALITY
  AS s(workspace, caller, context_id, task_id, message_id, fingerprint, n)),
retried AS (
  SELECT s.n, k.task_id FROM s JOIN a2a_retry_keys k ON k.workspace = s.workspace
    AND k.caller = s.caller AND k.message_id = s.message_id
    AND k.fingerprint = s.fingerprint),
claimed AS (
  INSERT INTO a2a_contexts AS c(workspace, caller, context_id, task_id, runner, lease_until)
  SELECT s.workspace, s.caller, s.context_id, s.task_id, $7::text, $8::bigint FROM s
  WHERE NOT EXISTS (SELECT 1 FROM retried r WHERE r.n = s.n)
  ON CONFLICT (workspace, caller, context_id) DO UPDATE SET task_id = excluded.task_id,
    runner = excluded.runner, lease_until = excluded.lease_until, cancel_requested = false
    WHERE c.lease_until < $9 OR (c.task_id = excluded.task_id AND c.runner = excluded.runner)
  RETURNING task_id)
SELECT r.task_id AS retried, cl.task_id IS NOT NULL AS claimed
FROM s LEFT JOIN retried r ON r.n = s.n LEFT JOIN claimed cl ON cl.task_id = s.task_id
ORDER BY s.n
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

    async def _lookups_or_claims(self, lookups: list[Lookup]) -> list[asyncpg.Record]:
        """One statement for the lookups waiting at once: a row each, in order."""
        return await self._fetch(
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
