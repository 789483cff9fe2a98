"""The JSON-RPC 2.0 binding: ``POST`` at the JSON-RPC mount (digest §1, §2, §6, §7).

Thin: authenticate, check the envelope, parse ``params`` into the rpc's request
message, call the service, encode. Methods are the schema's rpc names, found in the
service descriptor. Decisions:

- Every JSON-RPC error is HTTP 200, except a failed authentication (401 with
  ``WWW-Authenticate``, checked before the body is read, so ``id`` is null) and rate
  limiting (429 with ``Retry-After``).
- A missing ``id`` (a JSON-RPC notification) still gets an answer with ``"id": null``:
  every A2A operation has a result, and silence would hide errors.
- ``"params": null`` counts as absent; any other non-object ``params`` is -32600.
- ``DeleteTaskPushNotificationConfig`` answers ``"result": {}`` (the ProtoJSON of
  ``Empty``, as REST does); the SDK client only needs a ``result`` member.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import orjson
from aiohttp import web
from google.protobuf import descriptor, json_format, message, message_factory

from a2a_gateway.protocol import codec, sse
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    RateLimitedError,
    UnauthenticatedError,
    status_proto,
)
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR, method_name
from lf.a2a.v1 import a2a_pb2 as pb

from .http_context import (
    CONFIG,
    SERVICE,
    call_context,
    echo_extensions,
    error_headers,
    json_response,
    read_body,
    require_json,
    stream_events,
    unexpected,
)

JSONRPC_VERSION = "2.0"

RequestId = str | int | float | None
Unary = Callable[[message.Message, CallContext], Awaitable[message.Message]]
Streaming = Callable[[message.Message, CallContext], AsyncIterator[pb.StreamResponse]]

#: Errors that keep their HTTP status on this binding; all others are HTTP 200.
_TRANSPORT_ERRORS = (UnauthenticatedError, RateLimitedError)


def error_object(error: A2AError) -> dict[str, Any]:
    """``{code, message, data: [ErrorInfo, BadRequest?]}`` (digest §7.3)."""
    status = status_proto(error)
    return {
        "code": error.spec.jsonrpc_code,
        "message": error.message,
        "data": [json_format.MessageToDict(detail) for detail in status.details],
    }


def error_payload(request_id: RequestId, error: A2AError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": error_object(error)}


def error_response(request_id: RequestId, error: A2AError) -> web.Response:
    status = error.spec.http_status if isinstance(error, _TRANSPORT_ERRORS) else 200
    return json_response(
        error_payload(request_id, error), status=status, headers=error_headers(error)
    )


def _valid_id(value: Any) -> bool:
    # bool is an int subclass in Python, but not a JSON number.
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


class _Envelope:
    __slots__ = ("method", "params")

    def __init__(self, method: descriptor.MethodDescriptor, params: dict[str, Any] | None) -> None:
        self.method = method
        self.params = params


def _envelope(body: Any) -> _Envelope:
    """Check the JSON-RPC envelope (the id was already taken by the caller)."""
    if isinstance(body, list):
        raise InvalidRequestError("batch requests are not supported")
    if not isinstance(body, dict):
        raise InvalidRequestError("the request must be a JSON object")
    if body.get("jsonrpc") != JSONRPC_VERSION:
        raise InvalidRequestError('"jsonrpc" must be exactly "2.0"')
    if not _valid_id(body.get("id")):
        raise InvalidRequestError('"id" must be a string, a number or null')
    name = body.get("method")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError('"method" must be a non-empty string')
    method = SERVICE_DESCRIPTOR.methods_by_name.get(name)
    if method is None:
        raise MethodNotFoundError(
            f"Method not found: {name[:100]!r}", metadata={"method": name[:100]}
        )
    params = body.get("params")
    if params is not None and not isinstance(params, dict):
        raise InvalidRequestError('"params" must be a JSON object')
    return _Envelope(method, params)


async def handle(request: web.Request) -> web.StreamResponse:
    """``POST`` handler of the JSON-RPC mount."""
    request_id: RequestId = None
    try:
        context = call_context(request)
        require_json(request)
        raw = await read_body(request, request.app[CONFIG].max_body_bytes)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise JSONParseError(f"Invalid JSON payload: {exc}") from None
        if isinstance(body, dict) and _valid_id(body.get("id")):
            request_id = body.get("id")
        envelope = _envelope(body)
        codec.check_depth(envelope.params)
        cls = message_factory.GetMessageClass(envelope.method.input_type)
        params = codec.parse(cls, envelope.params, path="params")
        context.tenant = getattr(params, "tenant", "")
        return await _call(request, envelope.method, params, context, request_id)
    except A2AError as exc:
        return error_response(request_id, exc)
    except Exception as exc:
        return error_response(request_id, unexpected(exc, "JSON-RPC request"))


async def _call(
    request: web.Request,
    method: descriptor.MethodDescriptor,
    params: message.Message,
    context: CallContext,
    request_id: RequestId,
) -> web.StreamResponse:
    service = request.app[SERVICE]
    implementation = getattr(service, method_name(method.name))
    if method.server_streaming:
        events = cast(Streaming, implementation)(params, context)
        return await stream_events(
            request,
            events,
            context,
            keepalive_s=request.app[CONFIG].keepalive_interval_s,
            encode_event=lambda event: sse.encode(
                orjson.dumps(
                    {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": codec.to_dict(event)}
                )
            ),
            encode_error=lambda error: sse.encode(
                orjson.dumps(error_payload(request_id, error)), event="error"
            ),
            error_response=lambda error: error_response(request_id, error),
        )
    result = await cast(Unary, implementation)(params, context)
    response = json_response(
        {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": codec.to_dict(result)}
    )
    echo_extensions(response, context)
    return response
