"""The call context every service operation receives, whatever the binding."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

#: The protocol version this gateway serves (Major.Minor).
PROTOCOL_VERSION = "1.0"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: a named caller of one workspace (``workspace`` may be empty)."""

    name: str
    workspace: str = ""


ANONYMOUS = Caller(name="anonymous")


@dataclass(slots=True)
class CallContext:
    """Per-call facts decided by the binding before the service runs.

    ``deadline`` is an absolute ``loop.time()`` value, or ``None`` for no deadline.
    ``activated_extensions`` is filled by the service; HTTP bindings echo it in the
    ``A2A-Extensions`` response header.
    """

    caller: Caller = ANONYMOUS
    tenant: str = ""
    version: str = PROTOCOL_VERSION
    extensions: frozenset[str] = frozenset()
    deadline: float | None = None
    activated_extensions: set[str] = field(default_factory=set)
    #: ``JSONRPC``, ``HTTP+JSON`` or ``GRPC``: the binding the call came in on (logs).
    binding: str = ""
    #: A stream's resume point, ``<taskId>:<number>`` (SSE ``Last-Event-ID``, gRPC
    #: ``a2a-last-event-id``); empty: none (see docs/streams.md).
    resume_from: str = ""
    #: Set by the service before each event of a stream: the event's id in its task's
    #: event log (``<taskId>:<number>``), empty when it has none.
    event_id: str = ""

    def remaining(self) -> float | None:
        """Seconds left before the deadline (never negative), or ``None``."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())
