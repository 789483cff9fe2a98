"""Push configs as rows any process changes."""

from __future__ import annotations

from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

from ..task_store import (
    PushAdded,
    StoredPush,
)
from .connection import (
    PgConnection,
)
from .db_clock import DB_NOW_SQL

_READ_PUSH = """
SELECT config, version, added_ns FROM a2a_push_configs WHERE task_id = $1 ORDER BY position
"""

_PUT_PUSH = f"""
INSERT INTO a2a_push_configs AS p(task_id, position, config_id, version, config, added_ns)
VALUES ($1, $2, $3, $4, $5, {DB_NOW_SQL})
ON CONFLICT (task_id, config_id) DO UPDATE SET version = excluded.version,
  config = excluded.config
"""


class PgPushConfigs(PgConnection):
    """Push configs as rows any process changes."""

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
