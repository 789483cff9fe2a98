"""The call context every service operation receives, whatever the binding."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

#: The protocol version this gateway serves (Major.Minor).
PROTOCOL_VERSION = "1.0"


@dataclass(frozen=True, slots=True)
class OnBehalf:
    """A personal agent speaking for one of its users (PACT): the token's ``iss`` and
    ``sub``, verified, but chosen by the personal agent (untrusted text to an LLM)."""

    agent: str
    user: str
    #: PACT Delegated, with a delegation token: the user's account id at the company
    #: (the token's ``sub``) and the scopes it grants; empty without a token.
    account: str = ""
    scopes: frozenset[str] = frozenset()
    #: Each scoped tool and the scopes that open it (the workspace's delegation).
    tool_scopes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: The delegation token itself: the bearer a scoped tool presents to the account API.
    token: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: a named caller of one workspace (``workspace`` may be empty).

    ``on_behalf`` is set for a personal agent's user (``server/pact``); it is shown to
    the agent, not part of the identity: ``name`` alone already tells users apart, and
    stored records keep only ``name`` and ``workspace``. ``delegate`` (callers.json's
    ``"delegate": true``, opt-in per caller) lets the assistant's turns for this caller
    use the ``a2a`` tool; it is not part of the identity either."""

    name: str
    workspace: str = ""
    on_behalf: OnBehalf | None = field(default=None, compare=False)
    delegate: bool = field(default=False, compare=False)


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
    #: The caller's W3C trace context (``traceparent``/``tracestate``), if it sent one:
    #: a traced gateway's span for this call continues the caller's trace.
    traceparent: str = ""
    tracestate: str = ""
    #: Whether the agent may answer a new message with a plain Message
    #: (``Agent.reply``). The PACT URL turns it off: every reply there is a turn whose
    #: task keeps it for retries.
    message_replies: bool = True
    #: A stream's resume point, ``<taskId>:<number>`` (SSE ``Last-Event-ID``, gRPC
    #: ``a2a-last-event-id``); empty: none (see docs/streams.md).
    resume_from: str = ""
    #: Set by the service before each event of a stream: the event's id in its task's
    #: event log (``<taskId>:<number>``), empty when it has none.
    event_id: str = ""
    #: Set by the service when its answer can be given again without it while a check
    #: of its own holds (a retry answered with the stored task, ``server/engine/
    #: replay.py``); a binding that keeps answers (the gRPC retry memo) keeps it with
    #: the answer and asks the service's check before each reuse. None: not so.
    replay: object = None
    #: Set by a binding that prints the answer whole as ProtoJSON (the JSON-RPC and
    #: HTTP+JSON 1.0 methods): the service may then give a stored task (a retried
    #: SendMessage's, GetTask's) as the task's JSON (``task_json``), not decoded into
    #: the answer message.
    prints_json: bool = False
    #: Set by the service when ``prints_json``: the answer's task as the ProtoJSON the
    #: binding prints in its place (the answer message then holds the task's id only).
    task_json: bytes | None = None

    def remaining(self) -> float | None:
        """Seconds left before the deadline (never negative), or ``None``."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())
