"""Task states, and the small helpers on task messages (timestamps, agent messages,
views) shared by the engine and the stores.

Terminal states are immutable (digest §5); interrupted states wait for the caller;
active states belong to a live run (or, with no run in this process, to a run lost in
a restart).
"""

from __future__ import annotations

import time

from google.protobuf import timestamp_pb2

from lf.a2a.v1 import a2a_pb2 as pb

from .ids import new_id

TERMINAL: frozenset[int] = frozenset(
    {
        pb.TASK_STATE_COMPLETED,
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_CANCELED,
        pb.TASK_STATE_REJECTED,
    }
)
INTERRUPTED: frozenset[int] = frozenset({pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_AUTH_REQUIRED})
ACTIVE: frozenset[int] = frozenset({pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING})
#: The states a ListTasks ``status`` filter may name (UNSPECIFIED means "any").
KNOWN_STATES: frozenset[int] = TERMINAL | INTERRUPTED | ACTIVE


def set_now(ts: timestamp_pb2.Timestamp) -> None:
    """Set ``ts`` to now, at millisecond precision (ProtoJSON then prints ``.123Z``)."""
    ms = time.time_ns() // 1_000_000
    ts.seconds, ts.nanos = divmod(ms, 1000)
    ts.nanos *= 1_000_000


def timestamp_ns(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1_000_000_000 + ts.nanos


def valid_text(text: str) -> str:
    """``text`` as a task and the wire can hold it: UTF-8 cannot encode a lone
    surrogate (a Python agent can make one, e.g. ``json.loads('"\\ud800"')``), and the
    protobuf runtime raises on one; it becomes U+FFFD, a surrogate pair its character.
    Agent text comes through here where the engine takes it in."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def agent_message(text: str, *, context_id: str, task_id: str = "") -> pb.Message:
    """An agent-role text message (status messages, failures, questions)."""
    return pb.Message(
        message_id=new_id(),
        context_id=context_id,
        task_id=task_id,
        role=pb.ROLE_AGENT,
        parts=[pb.Part(text=valid_text(text))],
    )


def task_view(
    task: pb.Task,
    history_length: int | None = None,
    *,
    include_artifacts: bool = True,
    into: pb.Task | None = None,
) -> pb.Task:
    """A copy of ``task`` with at most ``history_length`` recent messages (``None``:
    all) and, unless ``include_artifacts``, no artifacts; written ``into`` a given
    message (e.g. ``response.task``, saving a second copy) or a new one."""
    view = pb.Task() if into is None else into
    view.CopyFrom(task)
    if history_length is not None and len(view.history) > history_length:
        if history_length == 0:
            view.ClearField("history")
        else:
            del view.history[: len(view.history) - history_length]
    if not include_artifacts:
        view.ClearField("artifacts")
    return view


__all__ = [
    "ACTIVE",
    "INTERRUPTED",
    "KNOWN_STATES",
    "TERMINAL",
    "agent_message",
    "set_now",
    "task_view",
    "timestamp_ns",
]
