"""Blocking sends and stream events/s: the file store against PostgreSQL, one gateway
against two on one database (clients split between them, as a round-robin balancer
would), on a throwaway cluster (``server/pg_local.py``, fsync off).

    .venv/bin/python -P tools/bench_pg_store.py [--sends 2000] [--streams 40]

Workspaces go under build/bench-pg/. Measurements for docs/performance.md, never tests.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shutil
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tasks import HEADERS, Server, sends

from a2a_gateway.server.pg_local import LocalPostgres

ROOT = Path(__file__).resolve().parents[1] / "build" / "bench-pg"


async def stream_events(
    servers: list[Server], streams: int, chunks: int, concurrency: int
) -> float:
    """Events/s of SendStreamingMessage ``chunks:N`` streams (SSE), clients spread
    over ``servers``."""
    counter = itertools.count()
    events = 0

    async def client(session: aiohttp.ClientSession, server: Server) -> None:
        nonlocal events
        while (n := next(counter)) < streams:
            body = {
                "message": {
                    "messageId": f"stream-{time.time_ns()}-{n}",
                    "role": "ROLE_USER",
                    "parts": [{"text": f"chunks:{chunks}"}],
                }
            }
            async with session.post(
                f"{server.base}/message:stream", data=json.dumps(body), headers=HEADERS
            ) as response:
                async for line in response.content:
                    if line.startswith(b"data:"):
                        events += 1

    start = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(
            *(client(session, servers[i % len(servers)]) for i in range(concurrency))
        )
    return events / (time.perf_counter() - start)


async def measure(label: str, servers: list[Server], args: argparse.Namespace) -> None:
    await asyncio.gather(*(sends(s, 200, 8) for s in servers))  # warm-up
    start = time.perf_counter()
    per_server = args.sends // len(servers)
    await asyncio.gather(*(sends(s, per_server, 16 // len(servers)) for s in servers))
    send_rate = per_server * len(servers) / (time.perf_counter() - start)
    event_rate = await stream_events(servers, args.streams, 100, 8)
    print(f"{label:34} blocking sends {send_rate:7.0f}/s  stream events {event_rate:7.0f}/s")


async def main(args: argparse.Namespace) -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    async with Server(ROOT / "files", []) as server:
        await measure("file store, 1 gateway", [server], args)
    with LocalPostgres() as pg:
        pg_flags = ["--store", "postgres", "--database-url", pg.url]
        async with Server(ROOT / "pg", pg_flags) as server:
            await measure("postgres, 1 gateway", [server], args)
        async with Server(ROOT / "pg", pg_flags) as a, Server(ROOT / "pg", pg_flags) as b:
            await measure("postgres, 2 gateways (clients split)", [a, b], args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=40)
    asyncio.run(main(parser.parse_args()))
