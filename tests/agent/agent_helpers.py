"""Helpers for agent tests: build a Turn, run an agent's turn to its end (bounded)."""

from __future__ import annotations

import asyncio

from a2a_gateway.agent.base import Agent, Output, Signal, Turn
from a2a_gateway.protocol.context import Caller
from lf.a2a.v1 import a2a_pb2 as pb

CALLER = Caller(name="tester", workspace="/ws")


def turn(text: str, *, task_id: str = "t-1", cancelled: Signal | None = None) -> Turn:
    message = pb.Message(message_id="m-1", role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    task = pb.Task(id=task_id, context_id="c-1", history=[message])
    return Turn(
        message=message,
        task=task,
        caller=CALLER,
        context_id="c-1",
        cancelled=cancelled or Signal(),
    )


async def outputs(agent: Agent, the_turn: Turn) -> list[Output]:
    found: list[Output] = []
    async with asyncio.timeout(10):
        async for output in agent.run(the_turn):
            found.append(output)
    return found
