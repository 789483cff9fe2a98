"""Outbound A2A: the typed service over JSON-RPC, HTTP+JSON and gRPC (and A2A 0.3
JSON-RPC / HTTP+JSON / gRPC for agents that offer nothing newer).

    async with await connect("http://127.0.0.1:8080", key=key) as agent:
        reply = await agent.send_message(request)

Errors are the protocol's typed :class:`~a2a_gateway.protocol.errors.A2AError` classes;
:class:`Unreachable`, :class:`Timeout`, :class:`AuthRejected` and :class:`CardError`
subclass them and should be caught first.
"""

from a2a_gateway.local.redaction import Redactor

from .cards import WELL_KNOWN_PATH, binding_for, card_url, choose_interface, fetch_card, parse_card
from .credentials import ClientAuth, Credentials, credentials_for
from .errors import AuthRejected, CardError, Timeout, Unreachable
from .grpc03 import Grpc03Transport
from .grpc_transport import GrpcTransport
from .jsonrpc import JsonRpcTransport
from .jsonrpc03 import JsonRpc03Transport
from .messages import file_part, send_request, task_text, user_message
from .remote import RemoteService, connect, make_transport, resolve_card
from .rest import RestTransport
from .rest03 import Rest03Transport
from .resumable import resumable_stream
from .transport import (
    DEFAULT_STREAM_IDLE_TIMEOUT,
    DEFAULT_TIMEOUT,
    GRPC,
    HTTP_JSON,
    JSONRPC,
    CallOptions,
    Transport,
)

__all__ = [
    "DEFAULT_STREAM_IDLE_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "GRPC",
    "HTTP_JSON",
    "JSONRPC",
    "WELL_KNOWN_PATH",
    "AuthRejected",
    "CallOptions",
    "CardError",
    "ClientAuth",
    "Credentials",
    "Grpc03Transport",
    "GrpcTransport",
    "JsonRpc03Transport",
    "JsonRpcTransport",
    "Redactor",
    "RemoteService",
    "Rest03Transport",
    "RestTransport",
    "Timeout",
    "Transport",
    "Unreachable",
    "binding_for",
    "card_url",
    "choose_interface",
    "connect",
    "credentials_for",
    "fetch_card",
    "file_part",
    "make_transport",
    "parse_card",
    "resolve_card",
    "resumable_stream",
    "send_request",
    "task_text",
    "user_message",
]
