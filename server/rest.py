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
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import hdrs, web
from google.protobuf import json_format, message

from a2a_gateway.protocol import codec, routes, sse
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import (
    A2AError,
    MethodNotAllowedError,
    MethodNotFoundError,
    status_proto,
)
from lf.a2a.v1 import a2a_pb2 as pb

from .http_context import (
    A2A_JSON_CONTENT_TYPE,
    CONFIG,
    RPCS,
    call_context,
    call_rpc,
    echo_extensions,
    error_headers,
    json_response,
    read_body,
    require_json,
    unexpected,
)

CONTENT_TYPE = A2A_JSON_CONTENT_TYPE

REST_PREFIX = web.AppKey("a2a_rest_prefix", str)


def error_body(error: A2AError) -> dict[str, Any]:
    """``{"error": google.rpc.Status}`` with the HTTP status as ``code``."""
    status = status_proto(error, code_as_http=True)
    return {
        "error": {
            "code": status.code,
            "status": error.spec.grpc_status.name,
            "message": error.message,
            "details": [json_format.MessageToDict(detail) for detail in status.details],
        }
    }


def error_response(error: A2AError) -> web.Response:
    headers = error_headers(error)
    if isinstance(error, MethodNotAllowedError):
        headers[hdrs.ALLOW] = error.metadata.get("allow", "")
    return json_response(
        error_body(error),
        status=error.spec.http_status,
        content_type=CONTENT_TYPE,
        headers=headers,
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
    try:
        context = call_context(request)
        path = relative_path(request, request.app[REST_PREFIX])
        if path is None:
            raise MethodNotFoundError(f"no HTTP+JSON route for {request.method} {_shown(request)}")
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
        params = await _params(request, found)
        context.tenant = getattr(params, "tenant", "")
        return await _call(request, found.route, params, context)
    except A2AError as exc:
        return error_response(exc)
    except Exception as exc:
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
    return codec.parse(cls, data, path="body")


def _shown(request: web.Request) -> str:
    return request.raw_path.split("?", 1)[0][:200]


class _StreamCodec:
    """This binding's SSE shapes: the StreamResponse itself, and the error body."""

    __slots__ = ()

    def event(self, event: pb.StreamResponse) -> bytes:
        # Compact JSON is one line: no need for sse.encode's line splitting.
        return b"".join((b"data: ", codec.to_json(event), b"\n\n"))

    def error(self, error: A2AError) -> bytes:
        return sse.encode(orjson.dumps(error_body(error)), event="error")

    def error_response(self, error: A2AError) -> web.StreamResponse:
        return error_response(error)


STREAM_CODEC = _StreamCodec()


async def _call(
    request: web.Request, route: routes.Route, params: message.Message, context: CallContext
) -> web.StreamResponse:
    outcome = await call_rpc(request, RPCS[route.rpc], params, context, STREAM_CODEC)
    if isinstance(outcome, web.StreamResponse):
        return outcome
    response = json_response(codec.to_dict(outcome), content_type=CONTENT_TYPE)
    echo_extensions(response, context)
    return response
