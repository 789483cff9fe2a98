"""Time from an event of a run on one engine to its delivery to a subscriber on another,
both on one PostgreSQL database (the event log, NOTIFY and LISTEN; a throwaway cluster).

    .venv/bin/python -P tools/bench_pg_events.py [--events 500] [--every-ms 5]

The two engines share this process (and its clock) but not their stores: each has
its own pool and LISTEN connection, so every event goes through the database. Prints
p50/p99/max of the delay. A measurement for docs/performance.md, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from a2a_gateway.agent.base import Agent, Completed, Output, TextChunk, Turn
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import PostgresTaskStore
from a2a_gateway.server.secret_box import SecretBox
from lf.a2a.v1 import a2a_pb2 as pb

CALLER = CallContext(caller=Caller(name="bench", workspace="/bench"))


class Ticker(Agent):
    """A chunk carrying its own send time (ns), every ``every_s``."""

    def __init__(self, count: int, every_s: float, go: asyncio.Event) -> None:
        self.count, self.every_s, self.go = count, every_s, go

    async def run(self, turn: Turn) -> AsyncIterator[Output]:
        await self.go.wait()
        for _ in range(self.count):
            yield TextChunk(f"{time.perf_counter_ns()} ")
            await asyncio.sleep(self.every_s)
        yield Completed("done")


async def main(args: argparse.Namespace) -> None:
    go = asyncio.Event()
    with LocalPostgres() as pg, tempfile.TemporaryDirectory(dir=Path.cwd()) as keys:
        box = SecretBox(Path(keys))
        a = TaskEngine(
            Ticker(args.events, args.every_ms / 1000, go), PostgresTaskStore(pg.url, box=box)
        )
        b = TaskEngine(FauxAgent(), PostgresTaskStore(pg.url, box=box))
        try:
            message = pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="go")])
            request = pb.SendMessageRequest(message=message)
            request.configuration.return_immediately = True
            task = (await a.send_message(request, CALLER)).task
            delays: list[float] = []
            stream = b.subscribe_to_task(pb.SubscribeToTaskRequest(id=task.id), CALLER)
            await anext(stream)
            go.set()
            async with asyncio.timeout(120):
                async for event in stream:
                    now = time.perf_counter_ns()
                    for part in event.artifact_update.artifact.parts:
                        delays.append((now - int(part.text)) / 1e6)
        finally:
            await a.aclose()
            await b.aclose()
    delays.sort()
    p50, p99 = delays[len(delays) // 2], delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    print(
        f"{len(delays)} events, one every {args.every_ms} ms: delay p50 {p50:.2f} ms,"
        f" p99 {p99:.2f} ms, max {delays[-1]:.2f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--every-ms", type=float, default=5.0)
    asyncio.run(main(parser.parse_args()))
