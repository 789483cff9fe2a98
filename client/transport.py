"""The one transport abstraction: an rpc name and a request message in, a response message
(or a stream of ``StreamResponse``) out. JSON-RPC, HTTP+JSON and gRPC implement it, so
:class:`~a2a_gateway.client.remote.RemoteService` never knows which wire is used.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.local.redaction import Redactor
from a2a_gateway.protocol import tracing
from a2a_gateway.protocol.context import PROTOCOL_VERSION
from a2a_gateway.protocol.resume import LAST_EVENT_ID_HEADER
from a2a_gateway.protocol.versioning import EXTENSIONS_HEADER, VERSION_HEADER, format_extensions

from .credentials import Credentials

M = TypeVar("M", bound=message.Message)

#: Binding names as cards spell them (``AgentInterface.protocolBinding``).
JSONRPC = "JSONRPC"
HTTP_JSON = "HTTP+JSON"
GRPC = "GRPC"

#: Default bound of one call, and of opening a stream (seconds).
DEFAULT_TIMEOUT = 60.0
#: Default bound of the silence between two stream events (keep-alives count as events).
DEFAULT_STREAM_IDLE_TIMEOUT = 300.0


def _ignore(_: frozenset[str]) -> None:
    return None


@dataclass(frozen=True, slots=True)
class CallOptions:
    """Per-call settings decided by the caller, whatever the wire.

    ``timeout`` bounds a unary call from start to parsed response, and the opening of a
    stream (until the response headers or the first message). ``idle_timeout`` bounds
    every later wait for a stream event. ``on_extensions`` receives the extensions the
    agent reports as activated (the ``A2A-Extensions`` response header or metadata).
    ``headers`` are the caller's own service parameters (``--header NAME=VALUE``).
    ``resume_from`` and ``on_event_id`` resume streams (docs/streams.md).
    """

    timeout: float = DEFAULT_TIMEOUT
    idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT
    extensions: frozenset[str] = frozenset()
    on_extensions: Callable[[frozenset[str]], None] = field(default=_ignore)
    headers: tuple[tuple[str, str], ...] = ()
    #: A stream's resume point (``Last-Event-ID``; gRPC ``a2a-last-event-id``).
    resume_from: str = ""
    #: Receives the id of each stream event that has one, before the event.
    on_event_id: Callable[[str], None] | None = None


def service_headers(
    options: CallOptions, credentials: Credentials | None, version: str = PROTOCOL_VERSION
) -> dict[str, str]:
    """The service parameters sent on every request (digest §9): the version, the
    extensions, the caller's own (which may replace those two), then the credentials."""
    headers = {VERSION_HEADER: version}
    if options.extensions:
        headers[EXTENSIONS_HEADER] = format_extensions(options.extensions)
    for name, value in options.headers:
        headers[name] = value
    if options.resume_from:
        headers[LAST_EVENT_ID_HEADER] = options.resume_from
    if credentials is not None:
        headers.update(credentials.headers())
    tracing.inject(headers)  # the next agent's spans join this call's trace
    return headers


class Transport(abc.ABC):
    """One wire to one agent interface. Implementations own their connections."""

    binding: ClassVar[str]

    def __init__(self, target: str, *, credentials: Credentials | None, redact: Redactor) -> None:
        self.target = target
        self.credentials = credentials
        self.redact = redact

    @abc.abstractmethod
    async def unary(
        self, rpc: str, request: message.Message, response_type: type[M], options: CallOptions
    ) -> M:
        """Call a unary rpc (schema name, e.g. ``GetTask``) and parse its response."""

    @abc.abstractmethod
    def stream(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        """Call a server-streaming rpc. Errors before the first event are raised on the first
        ``__anext__``; closing the iterator closes the HTTP response / cancels the call."""

    def sent_headers(self, options: CallOptions) -> dict[str, str]:
        """The service parameters and credentials each call carries (``-v`` shows them)."""
        return service_headers(options, self.credentials)

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release what this transport owns. Idempotent."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.redact(self.target)!r})"
