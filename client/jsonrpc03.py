"""The A2A 0.3 JSON-RPC binding, behind the same :class:`Transport` interface.

For agents that offer no 1.x interface. Each 1.0 rpc becomes its 0.3 method
(``message/send``, ``tasks/get``, ...; :data:`compat03.CALLS`), the 1.0 request becomes
0.3 params and the 0.3 result (or SSE event) becomes the 1.0 message, so callers never
know. No ``A2A-Version`` header is sent (absent means 0.3); extensions travel as
``X-A2A-Extensions``. ListTasks is not in A2A 0.3: it is sent as ``tasks/list``, which
some 0.3 agents serve (ours does), and an agent that answers that the method does not
exist (the a2a-sdk 0.3 releases) gives UnsupportedOperationError saying so.
Bounds, capped bodies and redaction are the 1.0 transports' (:class:`HttpTransport`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import orjson
from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import compat03
from a2a_gateway.protocol.errors import A2AError, MethodNotFoundError, UnsupportedOperationError
from a2a_gateway.protocol.versioning import format_extensions

from . import http_calls
from .cards import parse_card
from .credentials import Credentials
from .errors import from_jsonrpc_error, from_rest_error
from .subscribe03 import Subscribe03
from .transport import JSONRPC, CallOptions, M

#: The 0.3 name of the extensions header (1.0: ``A2A-Extensions``).
LEGACY_EXTENSIONS_HEADER = "X-A2A-Extensions"


def legacy_headers(options: CallOptions, credentials: Credentials | None) -> dict[str, str]:
    """What a 0.3 request carries: extensions under their 0.3 name, the credentials, and
    no ``A2A-Version`` (a 0.3 agent reads its absence as 0.3)."""
    headers: dict[str, str] = {}
    if options.extensions:
        headers[LEGACY_EXTENSIONS_HEADER] = format_extensions(options.extensions)
    for name, value in options.headers:
        headers[name] = value
    if credentials is not None:
        headers.update(credentials.headers())
    return headers


class JsonRpc03Transport(Subscribe03, http_calls.HttpTransport):
    """Calls one A2A 0.3 JSON-RPC endpoint (the interface ``url``) over a shared httpx
    client."""

    binding = JSONRPC

    def sent_headers(self, options: CallOptions) -> dict[str, str]:
        return legacy_headers(options, self.credentials)

    #: The protocol version this transport speaks (``AgentInterface.protocolVersion``).
    version = compat03.LEGACY_VERSION

    def _request(
        self, call: compat03.Call, request: message.Message, options: CallOptions, *, stream: bool
    ) -> httpx.Request:
        headers = legacy_headers(options, self.credentials)
        return self._post_rpc(call.method, call.params(request), headers, options, stream=stream)

    def _ok(self, status: int) -> bool:
        return status == 200

    def _error(self, status: int, body: bytes) -> A2AError:
        value: Any = None
        with contextlib.suppress(orjson.JSONDecodeError):
            value = orjson.loads(body)
        if isinstance(value, dict) and "error" in value and "jsonrpc" in value:
            error = self._rpc_error(value["error"], status)
        else:
            error = from_rest_error(status, body, self.redact)
        return self._explained(error)

    def _rpc_error(self, error: Any, status: int = 200) -> A2AError:
        return from_jsonrpc_error(compat03.error_in(error), self.redact, http_status=status)

    def _invalid(self, exc: A2AError) -> A2AError:
        return http_calls.invalid_response(self.target, "A2A 0.3 result", exc.message, self.redact)

    async def unary(
        self, rpc: str, request: message.Message, response_type: type[M], options: CallOptions
    ) -> M:
        call = compat03.legacy_call(rpc, jsonrpc=True)
        if not call.jsonrpc_only:
            return await self._unary(call, request, response_type, options)
        try:
            return await self._unary(call, request, response_type, options)
        except MethodNotFoundError as exc:
            raise UnsupportedOperationError(
                f"{rpc} does not exist in A2A 0.3, the only version this agent offers, and"
                f" it does not serve {call.method} either: {exc.message}"
            ) from None

    async def _unary(
        self,
        call: compat03.Call,
        request: message.Message,
        response_type: type[M],
        options: CallOptions,
    ) -> M:
        rpc = call.rpc
        body = await self._body(self._request(call, request, options, stream=False), options)
        value = http_calls.load_json(
            body, target=self.target, what="JSON-RPC response", redact=self.redact
        )
        if not isinstance(value, dict):
            raise http_calls.invalid_response(
                self.target, "JSON-RPC response", "not an object", self.redact
            )
        if "error" in value:
            raise self._explained(self._rpc_error(value["error"]))
        if "result" not in value and not call.result_optional:
            raise http_calls.invalid_response(
                self.target, "JSON-RPC response", "neither result nor error", self.redact
            )
        result = value.get("result")
        parsed: message.Message
        if call.result is None:  # the extended agent card: a 0.3 card, read as cards are
            parsed = parse_card(result, source=self.target, redact=self.redact)
        else:
            try:
                parsed = call.result(result, "result")
            except A2AError as exc:
                raise self._invalid(exc) from None
        if not isinstance(parsed, response_type):
            raise TypeError(f"{rpc} returns {type(parsed).__name__}, not {response_type.__name__}")
        return parsed

    async def _stream03(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        call = compat03.legacy_call(rpc)
        events = self._events(self._request(call, request, options, stream=True), options)
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
                    raise self._explained(self._rpc_error(value["error"]))
                try:
                    item = compat03.stream_response_in(value.get("result"))
                except A2AError as exc:
                    raise self._invalid(exc) from None
                yield item

    async def aclose(self) -> None:
        """The httpx client belongs to whoever passed it in."""
