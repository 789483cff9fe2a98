"""A retried send answered with the stored task, given again without the engine.

A SendMessage whose retry key names a stored task that needs no recovery is answered
with the task's stored bytes (``Intake._accept``). That answer is a function of the
request, the caller and three things that may change: the retry index (the key may
come to name another task: a task file removed by hand makes the retry a new message),
the task file (an edit by hand, a continuation, retention) and whether a run of the
task is live here. The engine notes such an answer on the call's context as a
:class:`StoredReplay`; a binding that keeps answers (the gRPC retry memo,
``server/retry_memo.py``) keeps it beside the wire bytes and, before giving them
again, asks :func:`replay_holds`: the same checks the retried path makes, each
answered without waiting (the index open, its keys recovered; the task file
``stat``ed as ``stored_bytes`` does), and the same store operations timed for the
metrics (``found_message`` as ``lookup_message``, ``stored_bytes`` as ``load``).
Anything that does not hold sends the call down the engine's path again.
"""

from __future__ import annotations

from a2a_gateway.protocol.context import Caller

from ..store_roles import RetryKeys, TaskRecords
from ..task_states import ACTIVE
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


def replay_holds(state: EngineState, keys: RetryKeys, tasks: TaskRecords, replay: object) -> bool:
    """Whether the engine would answer the call that gave ``replay`` as it did then:
    not closing, no live run of the task, the retry key still naming it (known without
    waiting), and the task file as it was (its ``stat`` as ``stored_bytes`` checks it,
    the same bytes, not active)."""
    if not isinstance(replay, StoredReplay) or state.closing:
        return False
    task_id = replay.task_id
    if task_id in state.runs:
        return False
    owner = replay.owner
    if keys.found_message(owner, replay.message_id, replay.fingerprint) != task_id:
        return False
    stored = tasks.stored_bytes(owner, task_id)
    if stored is None or stored[0] in ACTIVE:
        return False
    data = stored[1]
    return data is replay.task_bytes or data == replay.task_bytes


__all__ = ["StoredReplay", "replay_holds"]
