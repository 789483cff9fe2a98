"""The A2A 0.3 HTTP+JSON binding, behind the same :class:`Transport` interface.

0.3 REST paths carry a ``/v1`` prefix below the interface URL (``POST /v1/message:send``,
``GET /v1/tasks/{id}``, ...; digest §14.1) and their bodies are ProtoJSON of the 0.3
proto (``Message.content``, ``TASK_STATE_CANCELLED``, resource names). The translation
is :func:`compat03.rest_call` / :func:`compat03.rest_result_in`; headers, bounds and
errors are as for 0.3 JSON-RPC (:mod:`.jsonrpc03`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import orjson
from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import codec, compat03
from a2a_gateway.protocol.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InvalidAgentResponseError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from . import http_calls
from .cards import parse_card
from .errors import build, from_jsonrpc_error, from_rest_error
from .jsonrpc03 import legacy_headers
from .subscribe03 import Subscribe03
from .transport import HTTP_JSON, CallOptions, M

#: The a2a-sdk 0.3 releases' REST error statuses whose class is not the generic one for
#: the status (``a2a/utils/error_handlers.py``): an unknown route is FastAPI's
#: ``{"detail": …}``, so a ``{"message": …}`` 404 is the task (or push config) missing.
_SDK03_STATUS: dict[int, type[A2AError]] = {
    404: TaskNotFoundError,
    409: TaskNotCancelableError,
    422: InvalidParamsError,
    415: ContentTypeNotSupportedError,
    501: UnsupportedOperationError,
    502: InvalidAgentResponseError,
}


def _is_error_body(value: Any) -> bool:
    """An error sent as a plain event: 1.0-style ``{"error": Status}`` (the SDK's) or the
    0.3 ``{type?, code, message, data?}`` (ours: its ``message`` is a string, so it must
    not be read as a StreamResponse's ``message`` member)."""
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("error"), dict):
        return True
    return isinstance(value.get("code"), int) and isinstance(value.get("message"), str)


class Rest03Transport(Subscribe03, http_calls.HttpTransport):
    """Calls one A2A 0.3 HTTP+JSON base URL (the interface ``url``)."""

    binding = HTTP_JSON

    def sent_headers(self, options: CallOptions) -> dict[str, str]:
        return legacy_headers(options, self.credentials)

    version = compat03.LEGACY_VERSION

    def _request(
        self, rpc: str, request: message.Message, options: CallOptions, *, stream: bool
    ) -> httpx.Request:
        call = compat03.rest_call(rpc, request)
        headers = legacy_headers(options, self.credentials)
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        content: bytes | None = None
        if call.body is not None:
            headers["Content-Type"] = "application/json"
            content = codec.dumps(call.body)
        return self._build(
            call.http_method,
            self._base + call.path,
            headers,
            options,
            stream=stream,
            content=content,
            params=call.query or None,
        )

    _refused = http_calls.HttpTransport._not_a_stream

    def _error(self, status: int, body: bytes) -> A2AError:
        """A 1.0-style ``{"error": Status}`` body (the 1.x SDK's), a 0.3 JSON-RPC-style
        ``{code, message, data}`` one (ours, and older servers), or the a2a-sdk 0.3
        releases' bare ``{"message": …}``, whose class only its status tells."""
        value: Any = None
        with contextlib.suppress(orjson.JSONDecodeError):
            value = orjson.loads(body) if body else None
        if isinstance(value, dict) and "error" not in value and isinstance(value.get("code"), int):
            error = from_jsonrpc_error(compat03.error_in(value), self.redact, http_status=status)
        elif isinstance(value, dict) and set(value) == {"message"} and status in _SDK03_STATUS:
            error = build(_SDK03_STATUS[status], str(value["message"]), self.redact)
        else:
            error = from_rest_error(status, body, self.redact)
        return self._explained(error)

    def _invalid(self, exc: A2AError) -> A2AError:
        return http_calls.invalid_response(self.target, "A2A 0.3 result", exc.message, self.redact)

    async def unary(
        self, rpc: str, request: message.Message, response_type: type[M], options: CallOptions
    ) -> M:
        call = compat03.legacy_call(rpc)
        body = await self._body(self._request(rpc, request, options, stream=False), options)
        value = (
            http_calls.load_json(body, target=self.target, what="response", redact=self.redact)
            if body.strip()
            else None
        )
        parsed: message.Message
        if call.result is None:  # the extended agent card: a 0.3 card, read as cards are
            parsed = parse_card(value, source=self.target, redact=self.redact)
        else:
            try:
                parsed = call.result(compat03.rest_result_in(rpc, value), "body")
            except A2AError as exc:
                raise self._invalid(exc) from None
        if not isinstance(parsed, response_type):
            raise TypeError(f"{rpc} returns {type(parsed).__name__}, not {response_type.__name__}")
        return parsed

    async def _stream03(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        compat03.legacy_call(rpc)
        events = self._events(self._request(rpc, request, options, stream=True), options)
        async with contextlib.aclosing(events):
            async for event in events:
                value = http_calls.load_json(
                    event.data, target=self.target, what="stream event", redact=self.redact
                )
                if event.event == "error" or _is_error_body(value):
                    raise self._error(http_calls.stream_error_status(value), event.data.encode())
                try:
                    item = compat03.rest_stream_response_in(value)
                except A2AError as exc:
                    raise self._invalid(exc) from None
                yield item

    async def aclose(self) -> None:
        """The httpx client belongs to whoever passed it in."""
