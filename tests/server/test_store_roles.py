"""Every store is the set of its roles: each method of each role protocol
(``store_roles``) resolves to an implementation, never to the protocol's own stub
(whose body would answer None without a word)."""

from __future__ import annotations

import pytest

from a2a_gateway.server import store_roles
from a2a_gateway.server.event_log import MemoryEventLog
from a2a_gateway.server.file_store import WorkspaceTaskStore, WorkspaceTaskStores
from a2a_gateway.server.local_roles import (
    OneProcessClaims,
    OneProcessEventLogs,
    PushConfigsInRecords,
)
from a2a_gateway.server.memory_store import MemoryTaskStore
from a2a_gateway.server.memory_store.retry_keys import MemoryRetryKeys
from a2a_gateway.server.memory_store.tasks import MemoryTasks
from a2a_gateway.server.pg_store import PostgresTaskStore

ROLES = [getattr(store_roles, name) for name in store_roles.__all__]


def unimplemented(store_class: type) -> list[str]:
    """``Role.method`` of each role method ``store_class`` leaves to the protocol."""
    left = []
    for role in ROLES:
        for name, member in vars(role).items():
            if callable(member) and not name.startswith("_"):
                owner = getattr(store_class, name).__qualname__.split(".")[0]
                if owner in store_roles.__all__:
                    left.append(f"{role.__name__}.{name}")
    return sorted(left)


@pytest.mark.parametrize(
    "store_class",
    [MemoryTaskStore, WorkspaceTaskStore, WorkspaceTaskStores, PostgresTaskStore],
    ids=lambda cls: cls.__name__,
)
def test_each_store_implements_every_role(store_class: type) -> None:
    assert unimplemented(store_class) == []


def test_a_store_without_a_role_is_reported() -> None:
    class NoCancelSignals(
        MemoryTasks,
        MemoryRetryKeys,
        OneProcessEventLogs[MemoryEventLog],
        OneProcessClaims,
        PushConfigsInRecords,
    ):
        pass

    assert unimplemented(NoCancelSignals) == [
        "CancelSignals.on_cancel_request",
        "CancelSignals.request_cancel",
    ]
