"""0.3 <-> 1.0 value tables shared by every translation (digest §14.2)."""

from __future__ import annotations

from typing import Any

from lf.a2a.v1 import a2a_pb2 as pb

JSON = dict[str, Any]


#: The SDK's marker for a non-object ``Part.data`` wrapped as ``{"value": X}``.
DATA_PART_COMPAT = "data_part_compat"


#: 0.3 role <-> 1.0 role.
ROLES: tuple[tuple[str, pb.Role.ValueType], ...] = (
    ("user", pb.ROLE_USER),
    ("agent", pb.ROLE_AGENT),
)
ROLE_IN = dict(ROLES)
ROLE_OUT = {pb.Role.Name(value): name for name, value in ROLES}

#: 0.3 task state <-> 1.0 task state (``unknown`` is UNSPECIFIED).
TASK_STATES: tuple[tuple[str, pb.TaskState.ValueType], ...] = (
    ("unknown", pb.TASK_STATE_UNSPECIFIED),
    ("submitted", pb.TASK_STATE_SUBMITTED),
    ("working", pb.TASK_STATE_WORKING),
    ("completed", pb.TASK_STATE_COMPLETED),
    ("failed", pb.TASK_STATE_FAILED),
    ("canceled", pb.TASK_STATE_CANCELED),
    ("input-required", pb.TASK_STATE_INPUT_REQUIRED),
    ("rejected", pb.TASK_STATE_REJECTED),
    ("auth-required", pb.TASK_STATE_AUTH_REQUIRED),
)
#: 1.0 ProtoJSON state name -> 0.3 state.
STATE_OUT = {pb.TaskState.Name(value): name for name, value in TASK_STATES}
_TERMINAL_OUT = frozenset({"completed", "failed", "canceled", "rejected"})
#: Where a 0.3 stream ends, so its status update says ``final: true``: terminal and
#: interrupted states (a 0.3 client stops reading at the first final event).
FINAL_OUT = _TERMINAL_OUT | {"input-required", "auth-required"}


__all__ = [
    "DATA_PART_COMPAT",
    "FINAL_OUT",
    "JSON",
    "ROLES",
    "ROLE_IN",
    "ROLE_OUT",
    "STATE_OUT",
    "TASK_STATES",
]
