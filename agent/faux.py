"""The faux agent: a deterministic agent for demos, tests, interop and load.

It decides by the message's first text part:

=================  ====================================================================
``chunks:N``       N artifact chunks ``chunk-0`` .. ``chunk-(N-1)`` on one ``response``
                   artifact (append after the first, lastChunk on the last), then
                   completed. N is clamped to 1..10000 (not a number: 1).
``hold:S``         working, then waits S seconds (capped at 120; not a number: 1) or
                   until canceled, then completed.
``ask:QUESTION``   input-required with QUESTION as the status message; the reply (a
                   message on the same task) is handled like any message, so plain text
                   completes the task echoing the answer.
``fail:TEXT``      failed with TEXT.
``reject:TEXT``    rejected with TEXT.
``auth:TEXT``      auth-required with TEXT.
``message:TEXT``   a plain Message reply with TEXT; no task is created.
``crash``          raises (exercises the "The run failed unexpectedly." path).
anything else      completed, one ``response`` artifact whose text is exactly the input.
=================  ====================================================================

These are the bench's echo-agent rules (``hi``, ``chunks:N``, ``hold:S``), so the gateway
is a load target, plus one directive per task outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

from lf.a2a.v1 import a2a_pb2 as pb

from .base import (
    Agent,
    AuthRequired,
    Completed,
    Failed,
    InputRequired,
    Output,
    Rejected,
    TextChunk,
    Turn,
)

HOLD_CAP_S = 120.0
CHUNKS_CAP = 10_000


def _chunks(arg: str) -> int:
    try:
        return max(1, min(int(arg), CHUNKS_CAP))
    except ValueError:
        return 1


def _hold_seconds(arg: str) -> float:
    try:
        seconds = float(arg)
    except ValueError:
        return 1.0
    if seconds != seconds:  # NaN
        return 1.0
    return max(0.0, min(seconds, HOLD_CAP_S))


class FauxAgent(Agent):
    """Answers by directive (see the module docstring)."""

    async def reply(self, turn: Turn) -> pb.Message | None:
        text = turn.first_text()
        if not text.startswith("message:"):
            return None
        return pb.Message(
            message_id=str(uuid.uuid4()),
            context_id=turn.context_id,
            role=pb.ROLE_AGENT,
            parts=[pb.Part(text=text[8:])],
        )

    async def run(self, turn: Turn) -> AsyncIterator[Output]:
        text = turn.first_text()
        head, sep, arg = text.partition(":")
        if not sep:
            if text.strip() == "crash":
                raise RuntimeError("the faux agent crashed on request")
            yield TextChunk(text, last=True)
            return
        if head == "chunks":
            count = _chunks(arg)
            for index in range(count):
                yield TextChunk(f"chunk-{index}", last=index == count - 1)
        elif head == "hold":
            # Ends early when the task is canceled: the engine sets the signal and
            # cancels this coroutine.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_hold_seconds(arg)):  # no extra task, unlike wait_for
                    await turn.cancelled.wait()
            yield Completed()
        elif head == "ask":
            yield InputRequired(arg)
        elif head == "fail":
            yield Failed(arg)
        elif head == "reject":
            yield Rejected(arg)
        elif head == "auth":
            yield AuthRequired(arg)
        else:
            yield TextChunk(text, last=True)
