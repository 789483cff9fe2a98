"""Graceful drain: what a gateway does between SIGTERM and its exit (docs/reliability.md).

:class:`Drain` is the one place that knows whether the gateway is draining. Every A2A
call passes its gate (:class:`DrainGate`, a WrappedService around the service, so every binding
behaves the same): while serving, the gate counts unary calls in flight and keeps the
open streams; once draining, a new call is refused with :func:`shutting_down` (503 with
``Retry-After`` on HTTP, UNAVAILABLE on gRPC), every open stream ends with that same
error (the resumable close: a client resumes it elsewhere), and :meth:`Drain.run` waits
for the unary calls in flight (a blocking SendMessage holds its call until its task
settles) for at most the grace, or until asked to stop at once.

A stream is ended where it waits: a stream's consumer (the HTTP handler task, which
steps the SSE pump's producer; the gRPC handler task) that is inside the gate's
``__anext__`` is cancelled, and the gate turns that one cancellation back into
:class:`UnavailableError` (taking it back from the task, as ``asyncio.timeout`` does);
a consumer busy elsewhere (writing to a slow client) gets the error on its next
``__anext__`` (the SSE pump hands a cancellation that reached its write back to its
producer, waiting in the gate: taken back there, it ends the stream the same way). So
the gate costs a stream no task and no timer per event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Final, TypeVar

from google.protobuf import message

from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import UnavailableError
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.protocol.service_wrapper import WrappedService
from lf.a2a.v1 import a2a_pb2 as pb

from .events import Batch

log = logging.getLogger(__name__)

#: What a refused call and an ended stream say in ``Retry-After``: the replicas behind
#: the same address can take the call at once; this one is going away.
RETRY_AFTER_S: Final = 1

T = TypeVar("T")


def shutting_down() -> UnavailableError:
    """The error of a call refused, or a stream ended, by a draining gateway."""
    return UnavailableError(
        "The server is shutting down: retry the call, or resume the stream, elsewhere.",
        metadata={"retryAfterSeconds": str(RETRY_AFTER_S)},
    )


class Drain:
    """Whether the gateway drains, its unary calls in flight and its open streams."""

    __slots__ = ("_idle", "_streams", "calls", "draining")

    def __init__(self) -> None:
        self.draining = False
        self.calls = 0  # unary calls in flight
        self._streams: set[_GatedStream[Any]] = set()
        self._idle = asyncio.Event()  # set once draining with no call in flight

    def gate(self, service: A2AService) -> A2AService:
        """``service`` behind this drain's gate."""
        return DrainGate(service, self)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def begin(self) -> None:
        """Refuse new calls from now on and end every open stream (idempotent)."""
        if self.draining:
            return
        self.draining = True
        for stream in list(self._streams):
            stream.end()
        self._streams.clear()
        if not self.calls:
            self._idle.set()

    async def run(self, grace_s: float, interrupted: asyncio.Event | None = None) -> bool:
        """Drain: :meth:`begin`, then wait at most ``grace_s`` for the unary calls in
        flight to finish, or until ``interrupted`` is set. True when they all did."""
        self.begin()
        waits = {asyncio.ensure_future(self._idle.wait())}
        if interrupted is not None:
            waits.add(asyncio.ensure_future(interrupted.wait()))
        try:
            await asyncio.wait(waits, timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        finished = self._idle.is_set()
        if not finished:
            why = f"the {grace_s:g} s grace ran out"
            if interrupted is not None and interrupted.is_set():
                why = "asked to stop at once"
            log.warning("drain: %s with %d call(s) in flight; stopping", why, self.calls)
        return finished


class _GatedStream(AsyncIterator[T]):
    """One stream through the gate, ended by :meth:`end` (module doc). It opens on its
    first ``__anext__``: one asked for while draining is refused then, never started."""

    __slots__ = ("_cancelled", "_drain", "_ended", "_events", "_task", "_waiting")

    def __init__(self, drain: Drain, events: AsyncIterator[T]) -> None:
        self._drain = drain
        self._events: AsyncIterator[T] | None = events
        # The consumer: the task that pulls the first event (each binding pulls a stream
        # from one task), and whether it is inside __anext__ now.
        self._task: asyncio.Task[Any] | None = None
        self._waiting = False
        self._ended = False
        self._cancelled = False  # end() cancelled the consumer; not yet taken back

    async def __anext__(self) -> T:
        events = self._pull()
        try:
            return await events.__anext__()
        except asyncio.CancelledError:
            if self._cancelled and self._claim():
                raise shutting_down() from None
            raise
        except StopAsyncIteration:
            self._drain._streams.discard(self)
            raise
        finally:
            self._pulled()

    def _pull(self) -> AsyncIterator[T]:
        """Before each pull (of an event or a batch): the stream's events, the first
        pull gated (the stream opens, or is refused while draining)."""
        if self._ended:
            raise shutting_down()
        events = self._events
        if events is None:  # closed
            raise StopAsyncIteration
        if self._task is None:  # the first pull: the stream opens (or is refused)
            drain = self._drain
            if drain.draining:
                self._ended = True
                raise shutting_down()
            self._task = asyncio.current_task()
            drain._streams.add(self)
        self._waiting = True
        return events

    def _pulled(self) -> None:
        """After each pull, however it ended."""
        self._waiting = False
        if self._cancelled:  # one the stream swallowed is taken back too
            self._claim()

    def end(self) -> None:
        """End the stream with :func:`shutting_down` (cancelling its consumer if it is
        waiting for an event)."""
        self._ended = True
        task = self._task
        # A consumer whose cancellation is already asked for (its client left) is
        # left to it: it unwinds anyway, and the gate must not claim that one.
        if self._waiting and task is not None and not self._cancelled and not task.cancelling():
            self._cancelled = True
            task.cancel()

    def _claim(self) -> bool:
        """Take back :meth:`end`'s cancellation of the consumer; True when nothing
        else asked for its cancellation meanwhile."""
        self._cancelled = False
        task = self._task
        return task is not None and task.uncancel() == 0

    async def aclose(self) -> None:
        self._drain._streams.discard(self)
        events, self._events = self._events, None
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


class _GatedBatches(_GatedStream[pb.StreamResponse]):
    """A stream through the gate that also gives its events a batch at a time
    (``events.TaskStream``: the SSE writer's way), gated as :meth:`__anext__` is."""

    __slots__ = ()

    async def next_batch(self) -> Batch:
        """The next batch (``events.TaskStream.next_batch``); StopAsyncIteration at
        the end."""
        events = self._pull()
        try:
            return await events.next_batch()  # type: ignore[attr-defined,no-any-return]
        except asyncio.CancelledError:
            if self._cancelled and self._claim():
                raise shutting_down() from None
            raise
        except StopAsyncIteration:
            self._drain._streams.discard(self)
            raise
        finally:
            self._pulled()


class DrainGate(WrappedService):
    """``service`` behind a :class:`Drain`'s gate (see the module doc)."""

    def __init__(self, service: A2AService, drain: Drain) -> None:
        super().__init__(service)
        self._drain = drain

    async def unary(
        self, rpc: str, request: message.Message, call: Awaitable[T], context: CallContext
    ) -> T:
        drain = self._drain
        if drain.draining:
            close = getattr(call, "close", None)
            if close is not None:
                close()  # refused: the service's coroutine never runs
            raise shutting_down()
        drain.calls += 1
        try:
            return await call
        finally:
            drain.calls -= 1  # inline, not a method: every call runs this
            if drain.draining and not drain.calls:
                drain._idle.set()

    def stream(
        self,
        rpc: str,
        request: message.Message,
        events: AsyncIterator[pb.StreamResponse],
        context: CallContext,
    ) -> AsyncIterator[pb.StreamResponse]:
        if hasattr(events, "next_batch"):
            return _GatedBatches(self._drain, events)
        return _GatedStream(self._drain, events)


__all__ = ["RETRY_AFTER_S", "Drain", "DrainGate", "shutting_down"]
