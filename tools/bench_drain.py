"""What the drain's gate costs, in-process (docs/performance.md, issue 25).

    .venv/bin/python -P tools/bench_drain.py

Every A2A call passes :class:`~a2a_gateway.server.drain.DrainGate`: a unary call one
more coroutine frame and a counter, a stream one more ``__anext__`` per event. Times a
unary call and a stream's events through the gate against the same calls on the bare
service (a service that answers at once, so only the gate is timed). Best of several
rounds, to see the cost without the host's noise; the sends/s comparison is
``tools/bench_compare.py``'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.service import A2AService
from a2a_gateway.server.drain import Drain
from lf.a2a.v1 import a2a_pb2 as pb

ROUNDS = 9
CALLS = 200_000
TASK = pb.Task(id="t")
EVENT = pb.StreamResponse(task=TASK)
CONTEXT = CallContext()


class Instant(A2AService):
    """Answers at once: a task for GetTask, CALLS events for SubscribeToTask."""

    async def get_task(self, request: pb.GetTaskRequest, context: CallContext) -> pb.Task:
        return TASK

    async def subscribe_to_task(
        self, request: pb.SubscribeToTaskRequest, context: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        for _ in range(CALLS):
            yield EVENT

    # Not timed: None keeps the class concrete.
    send_message = send_streaming_message = list_tasks = cancel_task = None
    create_task_push_notification_config = get_task_push_notification_config = None
    list_task_push_notification_configs = delete_task_push_notification_config = None
    get_extended_agent_card = None


async def best_ns(run: Callable[[], Awaitable[None]]) -> float:
    """Best per-call (or per-event) time over ROUNDS rounds of CALLS, in ns."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        await run()
        best = min(best, (time.perf_counter_ns() - start) / CALLS)
    return best


def unary(service: A2AService) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        request = pb.GetTaskRequest(id="t")
        for _ in range(CALLS):
            await service.get_task(request, CONTEXT)

    return run


def stream(service: A2AService) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        events = service.subscribe_to_task(pb.SubscribeToTaskRequest(id="t"), CONTEXT)
        async for _ in events:
            pass

    return run


async def main() -> None:
    bare = Instant()
    gated = Drain().gate(bare)
    rows = []
    for name, make in (("a unary call", unary), ("a stream event", stream)):
        without = await best_ns(make(bare))
        through = await best_ns(make(gated))
        rows.append((name, through, without))
    print("| what | through the gate | bare service | added |")
    print("|---|---|---|---|")
    for name, through, without in rows:
        print(
            f"| {name} | {through / 1000:.3f} us | {without / 1000:.3f} us"
            f" | {(through - without) / 1000:.3f} us |"
        )


if __name__ == "__main__":
    asyncio.run(main())
