"""A retried send answered with the stored task, given again without the engine.

A SendMessage whose retry key names a stored task that needs no recovery is answered
with the task's stored bytes (``Intake._accept``). That answer is a function of the
request, the caller and three things that may change: the retry index (the key may
come to name another task: a task file removed by hand makes the retry a new message),
the task file (an edit by hand, a continuation, retention) and whether a run of the
task is live here. The engine notes such an answer on the call's context as a
:class:`StoredReplay`; a binding that keeps answers (the gRPC retry memo,
``server/retry_memo.py``) keeps, beside the wire bytes, the check :func:`replay_check` prepares once
and makes before giving them again: the same checks the retried path makes, each
answered without waiting (the index open, its keys recovered; the task file
``stat``ed as ``stored_bytes`` does), and the same store operations timed for the
metrics (as ``lookup_message`` and ``load``, ``metrics.meter_store``).
Anything that does not hold sends the call down the engine's path again.
"""

from __future__ import annotations

from collections.abc import Callable

from a2a_gateway.protocol.context import Caller

from ..store_roles import RetryKeys
from .state import EngineState


class StoredReplay:
    """What a retried send answered with the stored task's bytes was checked against."""

    __slots__ = ("fingerprint", "message_id", "owner", "task_bytes", "task_id")

    def __init__(
        self, owner: Caller, message_id: str, fingerprint: str, task_id: str, task_bytes: bytes
    ) -> None:
        self.owner = owner
        self.message_id = message_id
        self.fingerprint = fingerprint
        self.task_id = task_id
        self.task_bytes = task_bytes


def replay_check(state: EngineState, keys: RetryKeys, replay: object) -> Callable[[], bool] | None:
    """The check of whether the engine would answer the call that gave ``replay`` as it
    did then, made on each later call: not closing, no live run of the task, and the
    store's :meth:`~..store_roles.RetryKeys.replay_check` (the retry key still naming
    the task, known without waiting; the task file as it was, its ``stat`` as
    ``stored_bytes`` checks it: the same bytes, not active). None: no check (not a
    stored answer, or a store that cannot tell without waiting): nothing kept."""
    if not isinstance(replay, StoredReplay):
        return None
    task_id = replay.task_id
    stored = keys.replay_check(
        replay.owner, replay.message_id, replay.fingerprint, task_id, replay.task_bytes
    )
    if stored is None:
        return None
    runs = state.runs

    def holds() -> bool:
        return not state.closing and task_id not in runs and stored()

    return holds


__all__ = ["StoredReplay", "replay_check"]
