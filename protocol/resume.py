"""Resumable streams: the names a client and a server share (see docs/streams.md).

Every event of a task stream is numbered in its task's event log; the id of an event
is ``<taskId>:<number>`` (a Task snapshot's is the number of the last event it
reflects). A client that lost a stream calls SubscribeToTask again with the id of the
last event it received, and gets the events after it, then the live ones. Over SSE the
id is each event's ``id:`` and the resume point the ``Last-Event-ID`` header; over gRPC
the resume point is the request metadata :data:`GRPC_RESUME_KEY`, and each event's id
is in the event's own ``metadata`` under :data:`EVENT_ID_KEY` (gRPC has no per-message
header), for calls that activate :data:`RESUME_EXTENSION` or send a resume point.
"""

from __future__ import annotations

from .errors import FieldViolation, InvalidParamsError

#: The A2A extension a card lists when its streams can be resumed.
RESUME_EXTENSION = "urn:a2a-gateway:ext:resumable-streams:v1"
#: The SSE request header naming the resume point.
LAST_EVENT_ID_HEADER = "Last-Event-ID"
#: The gRPC request metadata naming the resume point.
GRPC_RESUME_KEY = "a2a-last-event-id"
#: (gRPC) The key of an event's id in its payload's ``metadata``.
EVENT_ID_KEY = "a2a-gateway.eventId"
#: Set (true) in the Task snapshot's ``metadata`` that answers a resume point whose
#: events are no longer kept (or are unknown here): the snapshot replaces them.
RESUME_EXPIRED = "a2a-gateway.resumeExpired"


def resume_point(value: str, task_id: str) -> int | None:
    """The event number of a resume point of ``task_id``'s stream (None: no resume
    point); InvalidParams for one that is not ``<taskId>:<number>`` of this task."""
    if not value:
        return None
    owner, sep, number = value.rpartition(":")
    if not sep or owner != task_id or not (number.isascii() and number.isdigit()):
        field = LAST_EVENT_ID_HEADER
        description = f"must be '{task_id}:<event number>' (an event id of this task's stream)"
        raise InvalidParamsError(
            f"{field}: {description}", violations=[FieldViolation(field, description)]
        )
    return int(number)


def event_number(event_id: str) -> tuple[str, int] | None:
    """(task id, number) of an event id, or None when it is not one of ours."""
    task_id, sep, number = event_id.rpartition(":")
    if not sep or not task_id or not (number.isascii() and number.isdigit()):
        return None
    return task_id, int(number)
