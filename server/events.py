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

With a store shared by several processes, the events of a run in another process come
from the task's event log, numbered; a subscriber of such a task keeps ``seq``, the
number of the last event it holds (its snapshot's to start with), so an event it
already holds is dropped, not repeated. A subscriber that joins later than the
process's follow of the log has events to catch up on: those are not queued but read
from the log a page (:data:`LOG_PAGE`) at a time as its stream drains them
(:meth:`Subscriber.catch_up`), and the follow's later events extend that range while
it lasts; so a joining subscriber costs a page of memory however far behind it starts,
and is never taken for a slow reader. Only events queued in memory count against
:data:`MAX_BACKLOG`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from a2a_gateway.protocol.errors import A2AError, UnavailableError
from lf.a2a.v1 import a2a_pb2 as pb

from .task_states import INTERRUPTED, TERMINAL

HIGH_WATER = 64
MAX_BACKLOG = 1024
SLOW_CONSUMER = "The stream fell behind and was closed; resubscribe with SubscribeToTask."
LOG_PAGE = 256  # events a catching-up subscriber reads from the log at a time

#: Reads the logged events numbered after the first number, up to the second, in order.
LogReader = Callable[[int, int], Awaitable[list[pb.StreamResponse]]]


class Subscriber:
    """One stream's queue. The stream takes the whole ``events`` list at a time
    (:meth:`next_batch`, which waits while it is empty)."""

    __slots__ = (
        "done",
        "error",
        "events",
        "log_at",
        "log_end",
        "read_log",
        "seq",
        "seqs",
        "taken_seqs",
        "until_interrupted",
        "waiter",
    )

    def __init__(self, *, until_interrupted: bool) -> None:
        # A list, swapped out whole by take(): cheaper than a deque (800 bytes empty)
        # for the thousand mostly idle streams a server may hold.
        self.events: list[pb.StreamResponse] = []
        #: The queued events' numbers in the task's event log (-1: not logged).
        self.seqs: list[int] = []
        #: The numbers of the batch :meth:`next_batch` returned last.
        self.taken_seqs: list[int] = []
        self.until_interrupted = until_interrupted
        self.done = False
        self.error: A2AError | None = None
        self.waiter: asyncio.Future[None] | None = None
        #: The number of the last event this stream holds in the task's event log: its
        #: snapshot's (or its resume point's), then the last one it queued or has to read.
        self.seq = 0
        #: Events numbered ``log_at + 1`` to ``log_end`` are still to be read from the
        #: log (with ``read_log``), before the queued ones.
        self.log_at = 0
        self.log_end = 0
        self.read_log: LogReader | None = None

    def catch_up(self, upto_seq: int, read_log: LogReader) -> None:
        """The events after ``seq`` up to ``upto_seq`` (logged, and already delivered
        to the others) are read from the log as the stream drains, not queued."""
        if upto_seq > self.seq:
            self.log_at, self.log_end, self.seq = self.seq, upto_seq, upto_seq
            self.read_log = read_log

    def resume_at(self, after: int, snapshot_seq: int, read_log: LogReader) -> None:
        """Start after event ``after`` instead of after the snapshot (numbered
        ``snapshot_seq``): the events between are read from the log (or those queued
        up to ``after`` dropped)."""
        if self.log_at >= self.log_end:
            self.log_at = self.log_end = snapshot_seq
        self.read_log = self.read_log or read_log
        if after < self.log_end:
            self.log_at = after
            return
        self.log_at = self.log_end
        self.seq = max(self.seq, after)
        kept = [i for i, seq in enumerate(self.seqs) if not seq or seq > after]
        self.events = [self.events[i] for i in kept]
        self.seqs = [self.seqs[i] for i in kept]

    def push(self, event: pb.StreamResponse, seq: int = 0) -> None:
        """Queue ``event``; ``seq`` is its number in the task's event log (0: not
        logged)."""
        if seq:
            if seq <= self.seq:
                return  # its snapshot (or resume point) reflects it
            self.seq = seq
            if self.log_at < self.log_end and not self.events:
                self.log_end = seq  # catching up: it is read from the log in turn
                return
        self.events.append(event)
        self.seqs.append(seq or -1)
        self._wake()

    def take(self) -> list[pb.StreamResponse]:
        """Every queued event, oldest first; the queue is empty afterwards (their
        numbers: :attr:`taken_seqs`)."""
        events, self.events = self.events, []
        self.taken_seqs, self.seqs = self.seqs, []
        return events

    def finish(self, error: A2AError | None = None) -> None:
        """No more events; the stream ends after the queued ones and those it still
        reads from the log (or with ``error``, which drops them)."""
        self.done = True
        if error is not None:
            self.error = error
            self.events = []
            self.seqs = []
            self.log_end = self.log_at
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_batch(self) -> list[pb.StreamResponse]:
        """The queued events, waiting for some if there are none; ``[]`` once the
        stream is done (raising its error, if it ended with one); their numbers in
        :attr:`taken_seqs`. Streams loop on this directly: no extra generator hop per
        event."""
        while True:
            if self.log_at < self.log_end and self.read_log is not None:
                after = self.log_at
                upto = min(after + LOG_PAGE, self.log_end)
                page = await self.read_log(after, upto)
                if self.error is not None:  # ended meanwhile (dropped, the run lost)
                    raise self.error
                self.log_at = upto
                self.taken_seqs = list(range(after + 1, after + 1 + len(page)))
                return page
            if self.events:
                return self.take()
            if self.done:
                if self.error is not None:
                    raise self.error
                return []
            # wait(), inline: a held stream keeps one coroutine frame fewer
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None

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

    def publish(self, event: pb.StreamResponse, state: int | None = None, seq: int = 0) -> None:
        """Queue ``event`` for every subscriber; ``state`` is set for status events and
        decides who is closed after it; ``seq`` is the event's number in a shared event
        log (see :meth:`Subscriber.push`)."""
        dropped: list[Subscriber] | None = None  # (made only when one is: rare)
        for subscriber in self.subscribers:
            subscriber.push(event, seq)
            backlog = len(subscriber.events)
            if backlog > HIGH_WATER:
                if backlog >= MAX_BACKLOG:
                    subscriber.finish(UnavailableError(SLOW_CONSUMER))
                    if dropped is None:
                        dropped = []
                    dropped.append(subscriber)
                else:
                    self.pressure = True
        if state is not None and (state in TERMINAL or state in INTERRUPTED):
            terminal = state in TERMINAL
            for subscriber in self.subscribers:
                if terminal or subscriber.until_interrupted:
                    subscriber.finish()
                    if dropped is None:
                        dropped = []
                    dropped.append(subscriber)
        if dropped is not None:
            self.subscribers = [s for s in self.subscribers if s not in dropped]

    def close(self, error: A2AError | None = None) -> None:
        """End every stream (after its queued events, or with ``error``)."""
        for subscriber in self.subscribers:
            subscriber.finish(error)
        self.subscribers = []
