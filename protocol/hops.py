"""The ``a2a-gateway.hops`` counter that stops agents delegating to each other forever.

Every gateway reads it the same way (request metadata, else the message's, else 0) and
sends ``hops + 1`` onwards; the engine fails a task whose count is over its limit, and
the proxy refuses to forward one.
"""

from __future__ import annotations

import lf.a2a.v1.a2a_pb2 as pb

from .errors import FieldViolation, InvalidParamsError

HOPS_KEY = "a2a-gateway.hops"


def read_hops(request: pb.SendMessageRequest) -> int:
    """The hop count of a request; a value that is not a non-negative integer (a JSON
    number or a string of ASCII digits) is InvalidParams naming where it was found."""
    for field, holder in (("metadata", request), ("message.metadata", request.message)):
        if not holder.HasField("metadata") or HOPS_KEY not in holder.metadata.fields:
            continue
        value = holder.metadata.fields[HOPS_KEY]
        kind = value.WhichOneof("kind")
        if kind == "number_value" and value.number_value.is_integer() and value.number_value >= 0:
            return int(value.number_value)
        text = value.string_value.strip() if kind == "string_value" else ""
        if text.isascii() and text.isdigit():
            return int(text)
        path = f"{field}.{HOPS_KEY}"
        raise InvalidParamsError(
            f"{path} must be a non-negative integer",
            violations=[FieldViolation(path, "must be a non-negative integer")],
        )
    return 0
