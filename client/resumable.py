"""A task stream that survives a dropped connection: when it breaks before its end (a
network error, an idle timeout, a clean close without the final state, or the agent's
UnavailableError, e.g. a gateway draining), it is resumed with SubscribeToTask from the
id of the last event received (docs/streams.md), after a pause that grows with each
failure in a row, at most ``len(pauses)`` times in a row. Events already received are
not received again; a resume point the agent no longer keeps is answered with the
task's snapshot (flagged :data:`~a2a_gateway.protocol.resume.RESUME_EXPIRED`).

An agent that does not number its events (no id came) is not resumed: its error is
raised as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Awaitable, Callable

from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import A2AError, DeadlineExceededError, UnavailableError
from a2a_gateway.protocol.resume import RESUME_EXTENSION
from lf.a2a.v1 import a2a_pb2 as pb

from .messages import INTERRUPTED_STATES, TERMINAL_STATES

#: Pauses before the resumes of a stream that keeps failing (seconds), then it gives up.
RESUME_PAUSES_S = (0.1, 0.5, 1.0, 2.0, 4.0)

Stream = AsyncGenerator[pb.StreamResponse, None]
Opener = Callable[[CallContext], Stream]
Subscriber = Callable[[pb.SubscribeToTaskRequest, CallContext], Stream]


def _state_of(event: pb.StreamResponse) -> tuple[str, int | None]:
    """(task id, state) an event tells; state None for one that tells none."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        return event.task.id, event.task.status.state
    if kind == "status_update":
        return event.status_update.task_id, event.status_update.status.state
    if kind == "artifact_update":
        return event.artifact_update.task_id, None
    return "", None


async def resumable_stream(
    open_stream: Opener,
    subscribe: Subscriber,
    *,
    until_interrupted: bool,
    on_resume: Callable[[str, A2AError | None], None],
    pauses: tuple[float, ...] = RESUME_PAUSES_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    call: CallContext | None = None,
) -> AsyncGenerator[pb.StreamResponse, None]:
    """The events of ``open_stream(context)``, resumed with ``subscribe`` as often as
    needed (see the module docstring). ``until_interrupted``: the stream ends at an
    input-required or auth-required state too (SendStreamingMessage's rule).
    ``on_resume(event_id, why)`` is called before each resume.

    ``call``: the context of a call this stream serves (proxy mode): each attempt goes
    with its caller, extensions, deadline and resume point, and each event's id is
    copied to its ``event_id``. Without it the attempts ask for event ids themselves
    (the extension activated)."""

    def attempt(resume_from: str) -> CallContext:
        if call is None:
            return CallContext(extensions=frozenset({RESUME_EXTENSION}), resume_from=resume_from)
        return dataclasses.replace(call, resume_from=resume_from or call.resume_from, event_id="")

    context = attempt("")
    events = open_stream(context)
    task_id = ""
    failures = 0
    while True:
        why: A2AError | None = None
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    failures = 0
                    found, state = _state_of(event)
                    task_id = task_id or found
                    if call is not None:
                        call.event_id = context.event_id
                    yield event
                    if event.HasField("message") or (
                        state is not None
                        and (
                            state in TERMINAL_STATES
                            or (until_interrupted and state in INTERRUPTED_STATES)
                        )
                    ):
                        return  # its end
        except (UnavailableError, DeadlineExceededError) as exc:  # Unreachable, Timeout too
            why = exc
        resume_from = context.event_id or context.resume_from  # (none came this time)
        if not resume_from or not task_id:
            if why is not None:
                raise why
            return  # not numbered: an end is an end
        if failures >= len(pauses):
            raise why or UnavailableError("The stream kept closing before the task's end.")
        await sleep(pauses[failures])
        failures += 1
        on_resume(resume_from, why)
        context = attempt(resume_from)
        events = subscribe(pb.SubscribeToTaskRequest(id=task_id), context)
