"""Task-state classes and small helpers shared by the engine and the stores.

Terminal states are immutable (digest §5); interrupted states wait for the caller;
active states belong to a live run (or, with no run in this process, to a run lost in
a restart).
"""

from __future__ import annotations

import os
import re
import time

from google.protobuf import timestamp_pb2

from lf.a2a.v1 import a2a_pb2 as pb

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

#: Task and context ids we accept: they become file names, so nothing else ever may.
ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,100}")


def valid_id(value: str) -> bool:
    """True when ``value`` is a safe task/context id (``[A-Za-z0-9_-]{1,100}``)."""
    return ID_PATTERN.fullmatch(value) is not None


def new_id() -> str:
    """A time-ordered (version 7, RFC 9562) UUID string, monotonic within this process.

    ListTasks orders by status timestamp (millisecond precision) and breaks ties on the
    id, descending, as the official SDK does; time-ordered ids make that tie-break
    "newest first" too, so tasks settled within one millisecond still list in order.
    """
    global _last_ms, _last_seq
    ms = time.time_ns() // 1_000_000
    if ms <= _last_ms:
        ms, seq = _last_ms, _last_seq + 1
        if seq > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
            ms, seq = ms + 1, 0
    else:
        seq = _random_bits(11)  # leaves room to count up within the millisecond
    _last_ms, _last_seq = ms, seq
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | _random_bits(62)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_last_ms = 0
_last_seq = 0
_pool = b""


def _random_bits(bits: int) -> int:
    """Bits from the OS CSPRNG, read 4 KiB at a time (one syscall per ~500 ids)."""
    global _pool
    size = (bits + 7) // 8
    if len(_pool) < size:
        _pool = os.urandom(4096)
    chunk, _pool = _pool[:size], _pool[size:]
    return int.from_bytes(chunk, "big") >> (size * 8 - bits)


def set_now(ts: timestamp_pb2.Timestamp) -> None:
    """Set ``ts`` to now, at millisecond precision (ProtoJSON then prints ``.123Z``)."""
    ms = time.time_ns() // 1_000_000
    ts.seconds, ts.nanos = divmod(ms, 1000)
    ts.nanos *= 1_000_000


def timestamp_ns(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1_000_000_000 + ts.nanos


def agent_message(text: str, *, context_id: str, task_id: str = "") -> pb.Message:
    """An agent-role text message (status messages, failures, questions)."""
    return pb.Message(
        message_id=new_id(),
        context_id=context_id,
        task_id=task_id,
        role=pb.ROLE_AGENT,
        parts=[pb.Part(text=text)],
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
