"""``serve --access-log``: one line per call that reaches the agent's service.

    access GRPC SendMessage caller=alice status=ok 12.3ms
    access JSONRPC GetTask caller=bob status=TASK_NOT_FOUND 0.4ms
    access HTTP+JSON SendStreamingMessage caller=alice status=ok 2004.1ms events=5

The binding, the method (the schema's rpc name), the caller's name, the outcome (``ok``,
the error's reason, or ``cancelled`` when the caller went away) and the duration; a
stream adds how many events it sent. Never a key, a token or any part of a body. Calls
refused before the service (a missing key, a bad signature, a rate limit) are logged by
the bindings themselves as warnings.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import A2AError
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.protocol.service_wrapper import WrappedService

log = logging.getLogger("a2a_gateway.access")
T = TypeVar("T")


def _outcome(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    if isinstance(exc, A2AError):
        return exc.spec.reason
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return "cancelled"
    return "internal-error"


class AccessLogged(WrappedService):
    """``service`` with one access-log line per call (see the module docstring)."""

    def __init__(self, service: A2AService) -> None:
        super().__init__(service)
        log.setLevel(logging.INFO)  # shown whatever --log-level says: it was asked for

    def _line(
        self, rpc: str, context: CallContext, started: float, exc: BaseException | None
    ) -> str:
        took = (time.perf_counter() - started) * 1000
        return (
            f"access {context.binding or '-'} {rpc} caller={context.caller.name}"
            f" status={_outcome(exc)} {took:.1f}ms"
        )

    async def unary(
        self, rpc: str, request: message.Message, call: Awaitable[T], context: CallContext
    ) -> T:
        started = time.perf_counter()
        try:
            result = await call
        except BaseException as exc:
            log.info("%s", self._line(rpc, context, started, exc))
            raise
        log.info("%s", self._line(rpc, context, started, None))
        return result

    async def stream(
        self,
        rpc: str,
        request: message.Message,
        events: AsyncIterator[pb.StreamResponse],
        context: CallContext,
    ) -> AsyncIterator[pb.StreamResponse]:
        started = time.perf_counter()
        sent = 0
        failure: BaseException | None = None
        try:
            async for event in events:
                sent += 1
                yield event
        except BaseException as exc:
            failure = exc
            raise
        finally:
            closing = getattr(events, "aclose", None)
            if closing is not None:
                await closing()
            log.info("%s events=%d", self._line(rpc, context, started, failure), sent)


__all__ = ["AccessLogged"]
