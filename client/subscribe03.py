"""SubscribeToTask on an A2A 0.3 agent, made to keep the 1.0 stream rules.

A 0.3 ``tasks/resubscribe`` (``TaskSubscription``) stream, as the 0.3 SDK serves it,
sends no opening task snapshot, refuses a task that is already terminal, and may end
without a final event (a cancelled task's stream, for one). A 1.0 stream starts with
the task and ends on its terminal or interrupted state, so every 0.3 transport opens a
subscription with :func:`subscribe_03`:

1. a GetTask first: a terminal task is UnsupportedOperationError (1.0's answer) without
   a subscription; otherwise the subscription is opened, and the task, read again while
   it opens, is the stream's first event;
2. the 0.3 events follow (a leading task snapshot, which some 0.3 servers send, is
   dropped: the stream already began with the task);
3. a stream that ends, or is refused, before a terminal or interrupted state is closed
   with the task's real state, read by another GetTask (nothing is added when that state
   is the last one seen).
"""

from __future__ import annotations

import abc
import asyncio
import functools
from collections.abc import AsyncGenerator, Callable

from google.protobuf import message

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.protocol.errors import A2AError, UnsupportedOperationError

from .messages import SETTLED_STATES, TERMINAL_STATES
from .transport import CallOptions, Transport


def _state_of(event: pb.StreamResponse) -> int | None:
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


async def subscribe_03(
    transport: Transport,
    request: pb.SubscribeToTaskRequest,
    options: CallOptions,
    open_stream: Callable[[], AsyncGenerator[pb.StreamResponse, None]],
) -> AsyncGenerator[pb.StreamResponse, None]:
    """The 1.0 SubscribeToTask stream over a 0.3 ``transport`` (see the module docstring);
    ``open_stream`` opens the transport's own 0.3 subscription."""
    get = pb.GetTaskRequest(id=request.id)
    task = await transport.unary("GetTask", get, pb.Task, options)
    if task.status.state in TERMINAL_STATES:
        name = pb.TaskState.Name(task.status.state)
        raise UnsupportedOperationError(
            f"task {request.id} is already {name}: there is nothing to subscribe to"
        )
    events = open_stream()
    # The subscription is opened before the task is handed out, and the task read again
    # while it opens: what the caller does once it has the task (a cancel, an answer) then
    # reaches the agent after the subscription did.
    opening = asyncio.ensure_future(anext(events))
    try:
        task = await transport.unary("GetTask", get, pb.Task, options)
        yield pb.StreamResponse(task=task)
        last: int = task.status.state
        if last in TERMINAL_STATES:
            return
        try:
            async for event in _joined(opening, events):
                if event.HasField("task"):
                    # A snapshot (some 0.3 servers open with one): the stream already
                    # began with the task, so only a change of state is passed on.
                    if event.task.status.state == last:
                        continue
                    event = _status_update(event.task)
                state = _state_of(event)
                if state is not None:
                    last = state
                yield event
                if last in SETTLED_STATES:
                    return
        except A2AError:
            # Refused or broken before the end: the task may have ended meanwhile (a 0.3
            # server refuses a task that became terminal); otherwise it is the error.
            now = await transport.unary("GetTask", get, pb.Task, options)
            if now.status.state not in TERMINAL_STATES:
                raise
        else:
            now = await transport.unary("GetTask", get, pb.Task, options)
        if now.status.state != last:
            yield _status_update(now)
    finally:
        if not opening.done():
            opening.cancel()
            await asyncio.wait([opening])  # our own cancellation still propagates
        if not opening.cancelled():
            opening.exception()  # delivered by _joined, or no longer of interest
        await events.aclose()


async def _joined(
    opening: asyncio.Future[pb.StreamResponse], events: AsyncGenerator[pb.StreamResponse, None]
) -> AsyncGenerator[pb.StreamResponse, None]:
    """The stream whose first event ``opening`` is waiting for."""
    try:
        first = await opening
    except StopAsyncIteration:
        return
    yield first
    async for event in events:
        yield event


def _status_update(task: pb.Task) -> pb.StreamResponse:
    return pb.StreamResponse(
        status_update=pb.TaskStatusUpdateEvent(
            task_id=task.id, context_id=task.context_id, status=task.status
        )
    )


class Subscribe03(Transport):
    """What the 0.3 transports share: ``stream`` is their own 0.3 stream
    (``_stream03``) for every rpc but SubscribeToTask, which :func:`subscribe_03`
    wraps."""

    def stream(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        if rpc == "SubscribeToTask" and isinstance(request, pb.SubscribeToTaskRequest):
            opened = functools.partial(self._stream03, rpc, request, options)
            return subscribe_03(self, request, options, opened)
        return self._stream03(rpc, request, options)

    @abc.abstractmethod
    def _stream03(
        self, rpc: str, request: message.Message, options: CallOptions
    ) -> AsyncGenerator[pb.StreamResponse, None]:
        """The transport's 0.3 stream of ``rpc``, as the agent sends it."""
