"""The JSON-RPC 2.0 binding: ``POST`` at the JSON-RPC mount (digest §1, §2, §6, §7).

Thin: authenticate, check the envelope, parse ``params`` into the rpc's request
message, call the service, encode. Methods are the schema's rpc names, found in the
service descriptor. Decisions:

- Every JSON-RPC error is HTTP 200, except a failed authentication (401 with
  ``WWW-Authenticate``) and rate limiting (429 with ``Retry-After``). Both are decided
  from the headers before the body is read (an unknown caller's body is never read),
  so their ``id`` is null; every error found once the envelope is read echoes its
  ``id``, a refused ``A2A-Version`` or Content-Type included (judged from the headers
  first, answered after the envelope is read).
- Any other HTTP method on the mount is 405 with ``Allow: POST`` and a JSON-RPC error
  body (-32600); the mount answers with and without a trailing slash.
- A missing ``id`` (a JSON-RPC notification) still gets an answer with ``"id": null``:
  every A2A operation has a result, and silence would hide errors.
- ``"params": null`` counts as absent; any other non-object ``params`` is -32600.
- ``DeleteTaskPushNotificationConfig`` answers ``"result": {}`` (the ProtoJSON of
  ``Empty``, as REST does); the SDK client only needs a ``result`` member.

A2A 0.3 methods (``message/send``, ``tasks/get``, ...; digest §13, §14) call the SAME
service operations through :mod:`a2a_gateway.protocol.compat03`. Their name is looked up
only after the 1.0 lookup misses, so the 1.0 path pays nothing for them. Version rule
(:mod:`a2a_gateway.protocol.versioning`, via :mod:`.http_version`): a 0.3 method
accepts no ``A2A-Version`` or ``0.3``/``0.3.x``; a 1.0 method keeps the 1.0 rule (a 0.3
header is VersionNotSupported, echoing the request's ``id``). The rule's refusal is
-32009 with its ErrorInfo on 0.3 methods too (0.3 has no code for it). A 0.3 method's
other errors use the 0.3 codes (1.0-only codes become -32603, as the SDK does) and
free-form ``data``.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import hdrs, web
from google.protobuf import message

from a2a_gateway.protocol import codec, compat03, sse, versioning
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    RateLimitedError,
    UnauthenticatedError,
    VersionNotSupportedError,
    status_details_json,
)
from lf.a2a.v1 import a2a_pb2 as pb

from .http_request import (
    CONFIG,
    METRICS,
    RPCS,
    Rpc,
    call_context,
    call_service,
    read_body,
    require_json,
)
from .http_response import (
    JSON_CONTENT_TYPE,
    Answer,
    echo_extensions,
    error_headers,
    json_response,
    unexpected,
)
from .http_sse import serve_stream
from .http_version import check_version, set_aside_legacy_version
from .metrics import INTERNAL, OK, UNKNOWN_METHOD

JSONRPC_VERSION = "2.0"

RequestId = str | int | float | None

#: Errors that keep their HTTP status on this binding; all others are HTTP 200.
_TRANSPORT_ERRORS = (UnauthenticatedError, RateLimitedError)


def error_object(error: A2AError) -> dict[str, Any]:
    """``{code, message, data: [ErrorInfo, BadRequest?]}`` (digest §7.3)."""
    return {
        "code": error.spec.jsonrpc_code,
        "message": error.message,
        "data": status_details_json(error),
    }


def error_payload(request_id: RequestId, error: A2AError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": error_object(error)}


def error_response(request_id: RequestId, error: A2AError) -> web.Response:
    return _error_response(error_payload(request_id, error), error)


def _error_response(payload: dict[str, Any], error: A2AError) -> web.Response:
    """An error ``payload`` with this binding's HTTP status for ``error`` (200, but for
    the transport errors)."""
    status = error.spec.http_status if isinstance(error, _TRANSPORT_ERRORS) else 200
    return json_response(payload, status=status, headers=error_headers(error))


_ID_TYPES = (str, int, float)  # (a tuple: ``str | int | float`` makes a union per call)


def _valid_id(value: Any) -> bool:
    # bool is an int subclass in Python, but not a JSON number.
    return value is None or (isinstance(value, _ID_TYPES) and not isinstance(value, bool))


class _Envelope:
    """A checked envelope: the rpc to call, and the 0.3 method when the name was one."""

    __slots__ = ("legacy", "params", "rpc")

    def __init__(
        self, rpc: Rpc, params: dict[str, Any] | None, legacy: compat03.Method | None = None
    ) -> None:
        self.rpc = rpc
        self.params = params
        self.legacy = legacy


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
    legacy = None
    if rpc is None:
        legacy = compat03.METHODS.get(name)
        if legacy is None:
            raise MethodNotFoundError(
                f"Method not found: {name[:100]!r}", metadata={"method": name[:100]}
            )
        rpc = RPCS[legacy.rpc]
    params = body.get("params")
    if params is not None and not isinstance(params, dict):
        raise InvalidRequestError('"params" must be a JSON object')
    return _Envelope(rpc, params, legacy)


async def handle(request: web.Request) -> web.StreamResponse:
    """``POST`` handler of the JSON-RPC mount."""
    meter = request.app[METRICS].jsonrpc
    started = meter.start()
    method = UNKNOWN_METHOD  # until the envelope names a known one
    request_id: RequestId = None
    legacy: compat03.Method | None = None
    try:
        request, legacy_header = set_aside_legacy_version(request)
        # Authentication (and rate limits) answer before the body is read, so with
        # "id": null; a version or Content-Type refusal waits for the envelope, so that
        # its answer echoes the request's id.
        deferred: A2AError | None = None
        try:
            context = await call_context(request, binding="JSONRPC")
            require_json(request)
        except (VersionNotSupportedError, InvalidRequestError) as exc:
            deferred = exc
        raw = await read_body(request, request.app[CONFIG].max_body_bytes)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise deferred or JSONParseError(f"Invalid JSON payload: {exc}") from None
        if isinstance(body, dict) and _valid_id(body.get("id")):
            request_id = body.get("id")
        if deferred is not None:
            method = _method_label(body)
            raise deferred
        envelope = _envelope(body)
        rpc = envelope.rpc
        method = rpc.name  # a 0.3 method counts under its 1.0 rpc
        legacy = envelope.legacy
        if legacy is not None or legacy_header is not None:
            check_version(request, legacy.name if legacy is not None else None, legacy_header)
            if legacy is not None:
                params = legacy.parse(envelope.params)
                context.version = compat03.LEGACY_VERSION
                del raw, body, envelope
                outcome = await call_service(request, rpc, params, context)
                del params  # as below
                if isinstance(outcome, message.Message):
                    answer = legacy_result_response(legacy, outcome, context, request_id)
                    meter.done(method, OK, started)
                    return answer
                return await serve_stream(
                    request,
                    outcome,
                    context,
                    LegacyStreamCodec(request_id),
                    meter,
                    method,
                    started,
                )
        params = codec.parse_request(rpc.request_class, envelope.params, path="params")
        context.tenant = getattr(params, "tenant", "")
        context.prints_json = True  # (result_response)
        del raw, body, envelope  # a held stream must not pin its request's JSON...
        outcome = await call_service(request, rpc, params, context)
        del params  # ...nor its request message: the service has it now
        if isinstance(outcome, message.Message):
            response = result_response(outcome, context, request_id)
            meter.done(method, OK, started)
            return response
        return await serve_stream(
            request, outcome, context, StreamCodec(request_id), meter, method, started
        )
    except A2AError as exc:
        meter.done(method, exc.spec.reason, started)
        if legacy is not None:
            return legacy_error_response(request_id, exc)
        return error_response(request_id, exc)
    except Exception as exc:
        meter.done(method, INTERNAL, started)
        error = unexpected(exc, "JSON-RPC request")
        if legacy is not None:
            return legacy_error_response(request_id, error)
        return error_response(request_id, error)


def _method_label(body: Any) -> str:
    """The metrics label of a refused call's method, when its envelope names one."""
    name = body.get("method") if isinstance(body, dict) else None
    if not isinstance(name, str):
        return UNKNOWN_METHOD
    rpc = RPCS.get(name)
    if rpc is None:
        legacy = compat03.METHODS.get(name)
        return legacy.rpc if legacy is not None else UNKNOWN_METHOD
    return rpc.name


async def not_post(request: web.Request) -> web.StreamResponse:
    """Any method but POST on the JSON-RPC mount: 405 with ``Allow: POST`` and a
    JSON-RPC Invalid Request (-32600) body, ``id`` null (no body is read)."""
    error = InvalidRequestError(
        f"{request.method[:16]} is not allowed on the JSON-RPC endpoint; use POST",
        metadata={"allow": hdrs.METH_POST},
    )
    return json_response(error_payload(None, error), status=405, headers={hdrs.ALLOW: "POST"})


_RESULT_HEAD = b'{"jsonrpc":"2.0","id":'
_RESULT_MIDDLE = b',"result":'


def result_body(
    request_id: RequestId, result: message.Message, task_json: bytes | None = None
) -> bytes:
    """``{"jsonrpc":"2.0","id":<id>,"result":<result>}``: the constant parts of the
    envelope are pre-encoded bytes, so only the id and the result are encoded (the
    result as :func:`codec.answer_json` prints it)."""
    result_json = codec.answer_json(result, task_json)
    return b"".join((_RESULT_HEAD, orjson.dumps(request_id), _RESULT_MIDDLE, result_json, b"}"))


class StreamCodec:
    """This binding's SSE shapes for one stream (one request id)."""

    __slots__ = ("_head", "request_id")

    def __init__(self, request_id: RequestId) -> None:
        self.request_id = request_id
        # Compact JSON is one line, so each event is this prefix, the result and "}".
        self._head = b"data: " + _RESULT_HEAD + orjson.dumps(request_id) + _RESULT_MIDDLE

    def event(self, event: pb.StreamResponse) -> bytes:
        return b"".join((self._head, codec.stream_event_json(event), b"}\n\n"))

    @property
    def json_frame(self) -> tuple[bytes, bytes] | None:
        """An event is this head, the StreamResponse's ProtoJSON and this tail."""
        return self._head, b"}\n\n"

    def error(self, error: A2AError) -> bytes:
        return sse.encode(orjson.dumps(error_payload(self.request_id, error)), event="error")

    def error_response(self, error: A2AError) -> web.StreamResponse:
        return error_response(self.request_id, error)


def result_response(
    result: message.Message, context: CallContext, request_id: RequestId
) -> web.Response:
    body = result_body(request_id, result, context.task_json)
    response = Answer(body=body, content_type=JSON_CONTENT_TYPE)
    echo_extensions(response, context)
    return response


# --- A2A 0.3 --------------------------------------------------------------------------


def legacy_error_payload(request_id: RequestId, error: A2AError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": compat03.error_object(error)}


def legacy_error_response(request_id: RequestId, error: A2AError) -> web.Response:
    """A 0.3 method's error: 0.3 codes, same HTTP status rule as 1.0. The version rule's
    refusal is answered in the 1.0 vocabulary (-32009 with ErrorInfo): 0.3 has no code
    for it."""
    if isinstance(error, versioning.VersionRefused):
        return error_response(request_id, error)
    return _error_response(legacy_error_payload(request_id, error), error)


class LegacyStreamCodec(StreamCodec):
    """The SSE shapes of a 0.3 stream: each ``result`` is the bare 0.3 object (with
    ``kind``); a mid-stream error is a plain ``data:`` event, as the SDK's 0.3 adapter
    sends it (its 0.3 client looks for ``error`` in every event's JSON)."""

    __slots__ = ()

    def event(self, event: pb.StreamResponse) -> bytes:
        return b"".join((self._head, orjson.dumps(compat03.stream_event(event)), b"}\n\n"))

    @property
    def json_frame(self) -> tuple[bytes, bytes] | None:
        """None: a 0.3 event is not the 1.0 ProtoJSON."""
        return None

    def error(self, error: A2AError) -> bytes:
        return sse.encode(orjson.dumps(legacy_error_payload(self.request_id, error)))

    def error_response(self, error: A2AError) -> web.StreamResponse:
        return legacy_error_response(self.request_id, error)


def legacy_result_response(
    method: compat03.Method,
    result: message.Message,
    context: CallContext,
    request_id: RequestId,
) -> web.Response:
    assert method.result is not None  # only the streaming methods have none
    payload = {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": method.result(result)}
    response = json_response(payload)
    echo_extensions(response, context)
    return response
