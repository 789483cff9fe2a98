"""``-v``: every call to an agent and its answers, written out for a person to read.

:class:`WireLog` wraps any :class:`~.transport.Transport` (JSON-RPC, HTTP+JSON, gRPC
alike): before each call it writes the rpc, the binding and URL, the service parameters
the transport sends (:meth:`~.transport.Transport.sent_headers`, credentials included) and the
request as ProtoJSON; then each answer (the response, every stream event, or the
error). Credentials never show: a credential header's value is ``***``, and the
transport's :class:`~a2a_gateway.local.redaction.Redactor` (every secret the caller
holds) runs over every line.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable

from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.errors import A2AError

from .transport import CallOptions, M, Transport

#: Header names whose values are credentials (compared in lower case).
_CREDENTIAL_WORDS = ("authorization", "key", "token", "secret", "cookie", "signature", "password")


def is_credential_header(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _CREDENTIAL_WORDS)


class WireLog(Transport):
    """``inner`` with every call and answer written to ``write`` (one string a line)."""

    def __init__(self, inner: Transport, write: Callable[[str], None]) -> None:
        super().__init__(inner.target, credentials=inner.credentials, redact=inner.redact)
        self.inner = inner
        self.binding = inner.binding  # type: ignore[misc] # the wrapped wire's
        self._write = write

    def _line(self, text: str) -> None:
        self._write(self.redact(text))

    def _call(self, rpc: str, request: message.Message, options: CallOptions) -> None:
        self._line(f"> {rpc} ({self.binding} {self.target})")
        for name, value in self.inner.sent_headers(options).items():
            self._line(f"> {name}: {'***' if is_credential_header(name) else value}")
        self._line(f"> {codec.to_json(request).decode()}")

    def _error(self, error: A2AError) -> None:
        self._line(f"< error {type(error).__name__}: {error.message}")

    async def unary(
        self, rpc: str, request: message.Message, response_type: type[M], options: CallOptions
    ) -> M:
        self._call(rpc, request, options)
        try:
            response = await self.inner.unary(rpc, request, response_type, options)
        except A2AError as exc:
            self._error(exc)
            raise
        self._line(f"< {codec.to_json(response).decode()}")
        return response

    async def stream(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        self._call(rpc, request, options)
        events = self.inner.stream(rpc, request, options)
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    self._line(f"< event {codec.to_json(event).decode()}")
                    yield event
        except A2AError as exc:
            self._error(exc)
            raise
        except GeneratorExit:  # the reader had what it needed (a resumable stream's end)
            self._line("< stream closed by the client")
            raise
        self._line("< end of stream")

    async def aclose(self) -> None:
        await self.inner.aclose()


def wired(inner: Transport, write: Callable[[str], None] | None) -> Transport:
    """``inner``, written out to ``write`` when one is given (``-v``)."""
    return inner if write is None else WireLog(inner, write)


__all__ = ["WireLog", "is_credential_header", "wired"]
