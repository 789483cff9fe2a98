"""Per-task fan-out of stream events to any number of streams and subscribers.

A :class:`Hub` belongs to one task; each open stream (SendStreamingMessage or
SubscribeToTask) holds a :class:`Subscriber`. Publishing never waits: events go into
each subscriber's own queue, shared (not copied) between subscribers, so every stream
gets the same events in the same order and the run never stalls on a consumer.

Memory is bounded per subscriber: above :data:`HIGH_WATER` queued events the hub raises
its ``pressure`` flag and the engine yields to the event loop once (a consumer that is
merely behind catches up); a consumer that still lets :data:`MAX_BACKLOG` events pile
up is slow or dead and is dropped: its queue is freed and its stream ends with
UnavailableError, so its client knows to resubscribe (a clean close would mean "done").

Closing rules are per subscriber: every stream ends after a terminal state's event;
SendStreamingMessage streams (``until_interrupted``) also end after an
input-required/auth-required one, SubscribeToTask streams do not.
"""

from __future__ import annotations

import asyncio

from a2a_gateway.protocol.errors import A2AError, UnavailableError
from lf.a2a.v1 import a2a_pb2 as pb

from .lifecycle import INTERRUPTED, TERMINAL

HIGH_WATER = 64
MAX_BACKLOG = 1024
SLOW_CONSUMER = "The stream fell behind and was closed; resubscribe with SubscribeToTask."


class Subscriber:
    """One stream's queue. The stream takes the whole ``events`` list at a time
    (:meth:`next_batch`, which waits while it is empty)."""

    __slots__ = ("done", "error", "events", "skip", "until_interrupted", "waiter")

    def __init__(self, *, until_interrupted: bool) -> None:
        # A list, swapped out whole by take(): cheaper than a deque (800 bytes empty)
        # for the thousand mostly idle streams a server may hold.
        self.events: list[pb.StreamResponse] = []
        self.until_interrupted = until_interrupted
        self.done = False
        self.error: A2AError | None = None
        self.waiter: asyncio.Future[None] | None = None
        #: Events still to drop: those its snapshot already reflects (a subscriber
        #: that joined another process's run with a snapshot newer than the hub).
        self.skip = 0

    def push(self, event: pb.StreamResponse) -> None:
        if self.skip:
            self.skip -= 1
            return
        self.events.append(event)
        self._wake()

    def take(self) -> list[pb.StreamResponse]:
        """Every queued event, oldest first; the queue is empty afterwards."""
        events, self.events = self.events, []
        return events

    def finish(self, error: A2AError | None = None) -> None:
        """No more events; the stream ends after the queued ones (or with ``error``,
        which also drops the queue)."""
        self.done = True
        if error is not None:
            self.error = error
            self.events = []
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_batch(self) -> list[pb.StreamResponse]:
        """The queued events, waiting for some if there are none; ``[]`` once the
        stream is done (raising its error, if it ended with one). Streams loop on
        this directly: no extra generator hop per event."""
        while True:
            if self.events:
                return self.take()
            if self.done:
                if self.error is not None:
                    raise self.error
                return []
            await self.wait()

    async def wait(self) -> None:
        """Return when an event is queued or the stream is done."""
        if self.events or self.done:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None


class Hub:
    """The subscribers of one task."""

    __slots__ = ("pressure", "subscribers")

    def __init__(self) -> None:
        self.subscribers: list[Subscriber] = []
        self.pressure = False

    def add(self, subscriber: Subscriber) -> None:
        self.subscribers.append(subscriber)

    def remove(self, subscriber: Subscriber) -> None:
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)

    def publish(self, event: pb.StreamResponse, state: int | None = None) -> None:
        """Queue ``event`` for every subscriber; ``state`` is set for status events and
        decides who is closed after it."""
        dropped: list[Subscriber] = []
        for subscriber in self.subscribers:
            subscriber.push(event)
            backlog = len(subscriber.events)
            if backlog > HIGH_WATER:
                if backlog >= MAX_BACKLOG:
                    subscriber.finish(UnavailableError(SLOW_CONSUMER))
                    dropped.append(subscriber)
                else:
                    self.pressure = True
        if state is not None and (state in TERMINAL or state in INTERRUPTED):
            terminal = state in TERMINAL
            for subscriber in self.subscribers:
                if terminal or subscriber.until_interrupted:
                    subscriber.finish()
                    dropped.append(subscriber)
        if dropped:
            self.subscribers = [s for s in self.subscribers if s not in dropped]

    def close(self, error: A2AError | None = None) -> None:
        """End every stream (after its queued events, or with ``error``)."""
        for subscriber in self.subscribers:
            subscriber.finish(error)
        self.subscribers = []
