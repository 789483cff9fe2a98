"""The JSON-RPC 2.0 binding: one POST URL, PascalCase methods, SSE for streams."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import orjson
from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.errors import A2AError

from . import http_calls
from .errors import from_jsonrpc_error, from_rest_error
from .transport import JSONRPC, CallOptions, M, service_headers


class JsonRpcTransport(http_calls.HttpTransport):
    """Calls one JSON-RPC endpoint (the interface ``url``) over a shared httpx client."""

    binding = JSONRPC

    def _request(
        self, rpc: str, request: message.Message, options: CallOptions, *, stream: bool
    ) -> httpx.Request:
        headers = service_headers(options, self.credentials)
        return self._post_rpc(rpc, codec.to_dict(request), headers, options, stream=stream)

    def _ok(self, status: int) -> bool:
        return status == 200

    def _error(self, status: int, body: bytes) -> A2AError:
        """The error of a non-result answer: a JSON-RPC error, or a plain HTTP failure."""
        value: Any = None
        with contextlib.suppress(orjson.JSONDecodeError):
            value = orjson.loads(body)
        if isinstance(value, dict) and "jsonrpc" in value and "error" in value:
            error = from_jsonrpc_error(value["error"], self.redact, http_status=status)
        else:
            error = from_rest_error(status, body, self.redact)
        return self._explained(error)

    async def unary(
        self, rpc: str, request: message.Message, response_type: type[M], options: CallOptions
    ) -> M:
        body = await self._body(self._request(rpc, request, options, stream=False), options)
        value = http_calls.load_json(
            body, target=self.target, what="JSON-RPC response", redact=self.redact
        )
        if not isinstance(value, dict):
            raise http_calls.invalid_response(
                self.target, "JSON-RPC response", "not an object", self.redact
            )
        if "error" in value:
            raise self._error(200, body)  # _body let only a 200 through
        if "result" not in value:
            raise http_calls.invalid_response(
                self.target, "JSON-RPC response", "neither result nor error", self.redact
            )
        return http_calls.parse_message(
            response_type, value["result"], target=self.target, redact=self.redact
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
                if not isinstance(value, dict):
                    raise http_calls.invalid_response(
                        self.target, "stream event", "not an object", self.redact
                    )
                if "error" in value:
                    raise self._explained(from_jsonrpc_error(value["error"], self.redact))
                item = http_calls.parse_message(
                    pb.StreamResponse, value.get("result"), target=self.target, redact=self.redact
                )
                if item.WhichOneof("payload") is not None:
                    yield item

    async def aclose(self) -> None:
        """The httpx client belongs to whoever passed it in."""
