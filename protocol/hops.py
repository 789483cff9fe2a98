"""The hop count that stops agents delegating to each other forever.

Two metadata keys carry it: ours, ``a2a-gateway.hops``, and ``volcanic.hops``, which
the seed implementation reads and writes. Each key is read as both implementations
read it (request metadata, else the message's); when both keys are present the larger
count wins, so a loop through a peer that speaks only the other key is still stopped.
Whoever sends a message onwards writes ``hops + 1`` under both keys
(:func:`stamp_hops`); the engine fails a task whose count is over its limit, and the
proxy refuses to forward one.
"""

from __future__ import annotations

import lf.a2a.v1.a2a_pb2 as pb

from .errors import FieldViolation, InvalidParamsError

HOPS_KEY = "a2a-gateway.hops"
VOLCANIC_HOPS_KEY = "volcanic.hops"
#: Every key a hop count is read from and written to.
HOPS_KEYS = (HOPS_KEY, VOLCANIC_HOPS_KEY)


def read_hops(request: pb.SendMessageRequest) -> int:
    """The hop count of a request: per key the request metadata, else the message's;
    the larger of the keys; 0 when none is set. A value that is not a non-negative
    integer (a JSON number or a string of ASCII digits) is InvalidParams naming where
    it was found."""
    if not request.HasField("metadata") and not request.message.HasField("metadata"):
        return 0  # the common send: nothing to read (no Struct views built)
    return max(_read(request, HOPS_KEY), _read(request, VOLCANIC_HOPS_KEY))


def has_hops(request: pb.SendMessageRequest) -> bool:
    """Whether any hop key is set, in the request or the message metadata."""
    return any(
        holder.HasField("metadata") and key in holder.metadata.fields
        for holder in (request, request.message)
        for key in HOPS_KEYS
    )


def stamp_hops(request: pb.SendMessageRequest, hops: int) -> None:
    """Write ``hops`` under every key in the request metadata (in place), where both
    implementations look first."""
    for key in HOPS_KEYS:
        request.metadata.fields[key].number_value = hops


def _read(request: pb.SendMessageRequest, key: str) -> int:
    message = request.message
    for field, present, metadata in (
        ("metadata", request.HasField("metadata"), request.metadata),
        ("message.metadata", message.HasField("metadata"), message.metadata),
    ):
        if not present or key not in metadata.fields:
            continue
        value = metadata.fields[key]
        kind = value.WhichOneof("kind")
        if kind == "number_value" and value.number_value.is_integer() and value.number_value >= 0:
            return int(value.number_value)
        text = value.string_value.strip() if kind == "string_value" else ""
        if text.isascii() and text.isdigit():
            return int(text)
        path = f"{field}.{key}"
        raise InvalidParamsError(
            f"{path} must be a non-negative integer",
            violations=[FieldViolation(path, "must be a non-negative integer")],
        )
    return 0
