"""The HTTP+JSON binding: paths from the schema's ``google.api.http`` annotations
(``protocol.routes``), ProtoJSON bodies, ``google.rpc.Status`` errors, SSE for streams."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

import httpx
from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import codec, routes
from a2a_gateway.protocol.errors import A2AError

from . import http_calls
from .errors import from_rest_error
from .transport import HTTP_JSON, CallOptions, M, service_headers

#: The REST media type (digest §8); servers accept ``application/json`` too.
A2A_JSON = "application/a2a+json"


class RestTransport(http_calls.HttpTransport):
    """Calls one HTTP+JSON base URL (the interface ``url``) over a shared httpx client."""

    binding = HTTP_JSON

    def _request(
        self, rpc: str, request: message.Message, options: CallOptions, *, stream: bool
    ) -> httpx.Request:
        tenant = getattr(request, "tenant", "")
        # The tenant travels as the /{tenant} path prefix (the schema's additional binding).
        route = routes.TENANT[rpc] if tenant else routes.PRIMARY[rpc]
        path, query, body = route.build(codec.to_dict(request))
        headers = service_headers(options, self.credentials)
        headers["Accept"] = sse_or_json(stream)
        content: bytes | None = None
        if body is not None:
            headers["Content-Type"] = A2A_JSON
            content = codec.dumps(body)
        return self._build(
            route.http_method,
            self._base + path,
            headers,
            options,
            stream=stream,
            content=content,
            params=tuple(query) if query else None,
        )

    _refused = http_calls.HttpTransport._not_a_stream

    def _error(self, status: int, body: bytes) -> A2AError:
        return self._explained(from_rest_error(status, body, self.redact))

    async def unary(
        self, rpc: str, request: message.Message, response_type: type[M], options: CallOptions
    ) -> M:
        body = await self._body(self._request(rpc, request, options, stream=False), options)
        value = (
            http_calls.load_json(body, target=self.target, what="response", redact=self.redact)
            if body.strip()
            else {}
        )
        return http_calls.parse_message(
            response_type, value, target=self.target, redact=self.redact
        )

    async def stream(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        events = self._events(self._request(rpc, request, options, stream=True), options)
        async with contextlib.aclosing(events):
            async for event in events:
                value = http_calls.load_json(
                    event.data, target=self.target, what="stream event", redact=self.redact
                )
                if event.event == "error" or (
                    isinstance(value, dict) and isinstance(value.get("error"), dict)
                ):
                    status = http_calls.stream_error_status(value)
                    raise self._error(status, event.data.encode())
                item = http_calls.parse_message(
                    pb.StreamResponse, value, target=self.target, redact=self.redact
                )
                if item.WhichOneof("payload") is not None:
                    yield item

    async def aclose(self) -> None:
        """The httpx client belongs to whoever passed it in."""


def sse_or_json(stream: bool) -> str:
    return "text/event-stream" if stream else f"{A2A_JSON}, application/json"
