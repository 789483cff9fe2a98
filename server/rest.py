"""The HTTP+JSON ("REST") binding: one catch-all route under the REST mount.

Routing comes from the schema (:mod:`a2a_gateway.protocol.routes`), matched on the
still-encoded path so ``%2F`` inside an id cannot split a segment. Decisions:

- Responses (and error bodies) are ``application/a2a+json`` as the spec says; the SDK
  client reads any JSON body whatever its type.
- A non-empty body whose Content-Type is not JSON gets ``InvalidRequest`` (400)
  naming the type, as on JSON-RPC (no new 415 error code); a missing Content-Type is
  read as JSON, and an empty body on a body route is an empty request (the SDK
  POSTs ``:subscribe`` and may POST ``:cancel`` without one).
- An unknown path is ``MethodNotFound`` (404); a known path with the wrong HTTP
  method is ``MethodNotAllowed`` (405) with ``Allow``.
- Errors: ``{"error": {code: <HTTP status>, status: <gRPC code name>, message,
  details: [ErrorInfo, BadRequest?]}}`` (digest §7.3); mid-stream errors are
  ``event: error`` with the same body.

A2A 0.3 (digest §13, §14): its paths carry a ``/v1`` prefix below the REST mount
(``<mount>/v1/message:send``, ...) and are tried before the 1.0 routes, so a 1.0 tenant
named ``v1`` loses exactly those paths (``/v1/tasks`` is still its ListTasks). They
call the same service operations through :mod:`a2a_gateway.protocol.compat03`; bodies
are 0.3 ProtoJSON, errors are ``{type, code, message, data}`` (the SDK's 0.3 REST
client reads ``type``). Version rule as on JSON-RPC (:mod:`.http_version`): a 0.3 path
takes no ``A2A-Version`` or 0.3; a 1.0 path never 0.3; a version error is the 1.0
``google.rpc.Status`` (reason ``VERSION_NOT_SUPPORTED``) on 0.3 paths too.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import hdrs, web
from google.protobuf import message

from a2a_gateway.protocol import codec, compat03, routes, sse, versioning
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    MethodNotAllowedError,
    MethodNotFoundError,
    status_details_json,
)
from lf.a2a.v1 import a2a_pb2 as pb

from .http_request import (
    CONFIG,
    METRICS,
    RPCS,
    call_context,
    call_service,
    read_body,
    require_json,
)
from .http_response import (
    A2A_JSON_CONTENT_TYPE,
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

CONTENT_TYPE = A2A_JSON_CONTENT_TYPE

REST_PREFIX = web.AppKey("a2a_rest_prefix", str)


def error_body(error: A2AError) -> dict[str, Any]:
    """``{"error": google.rpc.Status}`` with the HTTP status as ``code``."""
    return {
        "error": {
            "code": error.spec.http_status,
            "status": error.spec.grpc_status.name,
            "message": error.message,
            "details": status_details_json(error),
        }
    }


def error_response(error: A2AError) -> web.Response:
    return json_response(
        error_body(error),
        status=error.spec.http_status,
        content_type=CONTENT_TYPE,
        headers=error_headers(error),
    )


def relative_path(request: web.Request, prefix: str) -> str | None:
    """The raw (still percent-encoded) path below ``prefix``; None when outside it."""
    raw = request.raw_path.split("?", 1)[0].split("#", 1)[0]
    if not raw.startswith(prefix):
        return None
    rest = raw[len(prefix) :]
    if prefix and rest and not rest.startswith("/"):
        return None
    return rest


async def handle(request: web.Request) -> web.StreamResponse:
    """Every method and path under the REST mount."""
    meter = request.app[METRICS].rest
    started = meter.start()
    rpc = UNKNOWN_METHOD  # until a route matches
    try:
        request, legacy_header = set_aside_legacy_version(request)
        context = await call_context(request, binding="HTTP+JSON")
        path = relative_path(request, request.app[REST_PREFIX])
        if path is None:
            raise MethodNotFoundError(f"no HTTP+JSON route for {request.method} {_shown(request)}")
        if path.startswith(compat03.REST_PREFIX):
            legacy = compat03.rest_match(path)
            if legacy is not None:
                return await _handle_legacy(request, legacy, context, legacy_header, started)
        if legacy_header is not None:
            check_version(request, None, legacy_header)  # raises VersionNotSupported
        try:
            found = routes.match(request.method, path)
        except routes.RouteNotFound:
            raise MethodNotFoundError(
                f"no HTTP+JSON route for {request.method} {_shown(request)}"
            ) from None
        except routes.MethodNotAllowed as exc:
            allow = ", ".join(exc.allowed)
            raise MethodNotAllowedError(
                f"{request.method} is not allowed here; use {allow}", metadata={"allow": allow}
            ) from None
        rpc = found.route.rpc
        params = await _params(request, found)
        context.tenant = getattr(params, "tenant", "")
        context.prints_json = True  # (result_response)
        outcome = await call_service(request, RPCS[rpc], params, context)
        # A stream may last long; its request (inline file bytes and all) must not, nor
        # its path and route match.
        del params, path, found
        if isinstance(outcome, message.Message):
            response = result_response(outcome, context)
            meter.done(rpc, OK, started)
            return response
        return await serve_stream(request, outcome, context, STREAM_CODEC, meter, rpc, started)
    except A2AError as exc:
        meter.done(rpc, exc.spec.reason, started)
        return error_response(exc)
    except Exception as exc:
        meter.done(rpc, INTERNAL, started)
        return error_response(unexpected(exc, "HTTP+JSON request"))


async def _params(request: web.Request, found: routes.Match) -> message.Message:
    """The request message from the body, query and path (a separate frame, so that a
    held stream does not pin its request's JSON)."""
    route = found.route
    cls = RPCS[route.rpc].request_class
    body: Any = None
    if route.body == "*":
        limit = request.app[CONFIG].max_body_bytes
        raw = await read_body(request, limit)
        if raw.strip():  # an empty body has no type to check (SDK cancel/subscribe)
            require_json(request)
            body = codec.loads(raw, max_bytes=limit, depth=False)
            if not found.path_params:  # the body is the whole request
                fast = codec.parse_fast(cls, body)
                if fast is not None:
                    return fast
            codec.check_depth(body)
    data = routes.request_dict(found, request.rel_url.query.items(), body)
    fast = codec.parse_fast(cls, data)  # (GET /tasks/{id}, the other task-id routes)
    return fast if fast is not None else codec.parse(cls, data, path="body")


def _shown(request: web.Request) -> str:
    return request.raw_path.split("?", 1)[0][:200]


class _StreamCodec:
    """This binding's SSE shapes: the StreamResponse itself, and the error body."""

    __slots__ = ()

    #: An event is this head, the StreamResponse's ProtoJSON and this tail.
    json_frame = (b"data: ", b"\n\n")

    def event(self, event: pb.StreamResponse) -> bytes:
        # Compact JSON is one line: no need for sse.encode's line splitting.
        return b"".join((b"data: ", codec.stream_event_json(event), b"\n\n"))

    def error(self, error: A2AError) -> bytes:
        return sse.encode(orjson.dumps(error_body(error)), event="error")

    def error_response(self, error: A2AError) -> web.StreamResponse:
        return error_response(error)


STREAM_CODEC = _StreamCodec()


def result_response(result: message.Message, context: CallContext) -> web.Response:
    response = Answer(body=codec.answer_json(result, context.task_json), content_type=CONTENT_TYPE)
    echo_extensions(response, context)
    return response


# --- A2A 0.3 --------------------------------------------------------------------------


def legacy_error_response(error: A2AError) -> web.Response:
    """A 0.3 path's error in the 0.3 REST shape; the version rule's refusal in the 1.0
    shape (``google.rpc.Status``, reason ``VERSION_NOT_SUPPORTED``): 0.3 has none."""
    if isinstance(error, versioning.VersionRefused):
        return error_response(error)
    return json_response(
        compat03.rest_error_body(error),
        status=error.spec.http_status,
        content_type=JSON_CONTENT_TYPE,
        headers=error_headers(error),
    )


class _LegacyStreamCodec:
    """0.3 REST SSE: each event is a 0.3 ProtoJSON StreamResponse."""

    __slots__ = ()

    def event(self, event: pb.StreamResponse) -> bytes:
        return b"".join((b"data: ", orjson.dumps(compat03.rest_stream_event(event)), b"\n\n"))

    def error(self, error: A2AError) -> bytes:
        return sse.encode(orjson.dumps(compat03.rest_error_body(error)), event="error")

    def error_response(self, error: A2AError) -> web.StreamResponse:
        return legacy_error_response(error)


LEGACY_STREAM_CODEC = _LegacyStreamCodec()


async def _handle_legacy(
    request: web.Request,
    found: compat03.RestMatch,
    context: CallContext,
    legacy_header: str | None,
    started: float,
) -> web.StreamResponse:
    """One 0.3 REST call; every error in the 0.3 REST shape."""
    meter = request.app[METRICS].rest
    rpc = UNKNOWN_METHOD
    try:
        method = found.method(request.method)
        if method is None:
            allow = ", ".join(found.allowed)
            raise MethodNotAllowedError(
                f"{request.method} is not allowed here; use {allow}", metadata={"allow": allow}
            )
        rpc = method.rpc  # counted under its 1.0 rpc
        check_version(request, method.name, legacy_header)
        params = await _legacy_params(request, found, method)
        context.version = compat03.LEGACY_VERSION
        outcome = await call_service(request, RPCS[method.rpc], params, context)
        del params  # as in handle: not for the stream's life
        if not isinstance(outcome, message.Message):
            return await serve_stream(
                request, outcome, context, LEGACY_STREAM_CODEC, meter, rpc, started
            )
        response = json_response(
            compat03.rest_result(method, outcome), content_type=JSON_CONTENT_TYPE
        )
        echo_extensions(response, context)
        meter.done(rpc, OK, started)
        return response
    except A2AError as exc:
        meter.done(rpc, exc.spec.reason, started)
        return legacy_error_response(exc)
    except Exception as exc:
        meter.done(rpc, INTERNAL, started)
        return legacy_error_response(unexpected(exc, "HTTP+JSON 0.3 request"))


async def _legacy_params(
    request: web.Request, found: compat03.RestMatch, method: compat03.Method
) -> message.Message:
    body: Any = None
    if request.method in (hdrs.METH_POST, hdrs.METH_PUT, hdrs.METH_PATCH):
        limit = request.app[CONFIG].max_body_bytes
        raw = await read_body(request, limit)
        if raw.strip():
            require_json(request)
            body = codec.loads(raw, max_bytes=limit)
    params = found.params(request.method, request.rel_url.query, body)
    return method.parse(params)
