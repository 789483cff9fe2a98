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

from typing import Any

import orjson
from aiohttp import web
from google.protobuf import json_format, message

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
from lf.a2a.v1 import a2a_pb2 as pb

from .http_context import (
    CONFIG,
    JSON_CONTENT_TYPE,
    RPCS,
    Rpc,
    call_context,
    call_rpc,
    echo_extensions,
    error_headers,
    json_response,
    read_body,
    require_json,
    unexpected,
)

JSONRPC_VERSION = "2.0"

RequestId = str | int | float | None

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
    __slots__ = ("params", "rpc")

    def __init__(self, rpc: Rpc, params: dict[str, Any] | None) -> None:
        self.rpc = rpc
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
    rpc = RPCS.get(name)
    if rpc is None:
        raise MethodNotFoundError(
            f"Method not found: {name[:100]!r}", metadata={"method": name[:100]}
        )
    params = body.get("params")
    if params is not None and not isinstance(params, dict):
        raise InvalidRequestError('"params" must be a JSON object')
    return _Envelope(rpc, params)


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
        rpc = envelope.rpc
        params = codec.parse_request(rpc.request_class, envelope.params, path="params")
        context.tenant = getattr(params, "tenant", "")
        del raw, body, envelope  # a held stream must not pin its request's JSON
        return await _call(request, rpc, params, context, request_id)
    except A2AError as exc:
        return error_response(request_id, exc)
    except Exception as exc:
        return error_response(request_id, unexpected(exc, "JSON-RPC request"))


_RESULT_HEAD = b'{"jsonrpc":"2.0","id":'
_RESULT_MIDDLE = b',"result":'


def result_body(request_id: RequestId, result: message.Message) -> bytes:
    """``{"jsonrpc":"2.0","id":<id>,"result":<result>}``: the constant parts of the
    envelope are pre-encoded bytes, so only the id and the result are encoded."""
    return b"".join(
        (_RESULT_HEAD, orjson.dumps(request_id), _RESULT_MIDDLE, codec.to_json(result), b"}")
    )


class StreamCodec:
    """This binding's SSE shapes for one stream (one request id)."""

    __slots__ = ("_head", "request_id")

    def __init__(self, request_id: RequestId) -> None:
        self.request_id = request_id
        # Compact JSON is one line, so each event is this prefix, the result and "}".
        self._head = b"data: " + _RESULT_HEAD + orjson.dumps(request_id) + _RESULT_MIDDLE

    def event(self, event: pb.StreamResponse) -> bytes:
        return b"".join((self._head, codec.to_json(event), b"}\n\n"))

    def error(self, error: A2AError) -> bytes:
        return sse.encode(orjson.dumps(error_payload(self.request_id, error)), event="error")

    def error_response(self, error: A2AError) -> web.StreamResponse:
        return error_response(self.request_id, error)


async def _call(
    request: web.Request,
    rpc: Rpc,
    params: message.Message,
    context: CallContext,
    request_id: RequestId,
) -> web.StreamResponse:
    outcome = await call_rpc(request, rpc, params, context, StreamCodec(request_id))
    if isinstance(outcome, web.StreamResponse):
        return outcome
    response = web.Response(body=result_body(request_id, outcome), content_type=JSON_CONTENT_TYPE)
    echo_extensions(response, context)
    return response
