"""Benchmarks of a workspace with many stored tasks, and the large-message soak.

    .venv/bin/python -P tools/bench_tasks.py lists WORKSPACE [--sends 100000]
    .venv/bin/python -P tools/bench_tasks.py soak WORKSPACE --seconds 300

``lists`` starts ``a2a-gateway serve --faux`` on the workspace (seed one first with
``tools/seed_tasks.py``; the server keeps its index in ``.a2a/index.sqlite3``), then
measures over HTTP+JSON: ListTasks latency (p50/p99) for pages of 10, 50 and 100, without
a filter and with a context or status filter (walking pages with their tokens);
GetTask latency; a full walk of every page (pageSize 100); blocking-send throughput
(``--concurrency`` clients, unique messageIds) over ``--sends`` sends; and the server's
RSS at start, after the walk and after the sends. ``soak`` sends 1 MB and 10 MB
messages (the faux agent echoes them into the task) and reads each back with GetTask,
for ``--seconds``, printing the RSS every ``--every`` seconds.

Everything talks to 127.0.0.1 only. These are measurements for docs/performance.md,
never tests: the numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/a2a+json"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    def __init__(
        self, workspace: Path, extra: list[str], env: dict[str, str] | None = None
    ) -> None:
        self.workspace = workspace
        self.env = env  # (say, PYTHONPATH naming another checkout's package tree)
        self.port = free_port()
        self.extra = extra
        self.proc: asyncio.subprocess.Process | None = None
        self.base = f"http://127.0.0.1:{self.port}/a2a/v1"

    async def __aenter__(self) -> Server:
        command = [
            sys.executable,
            "-P",
            "-m",
            "a2a_gateway",
            "serve",
            "--faux",
            "--workspace",
            str(self.workspace),
            "--allow-anonymous",
            "--port",
            str(self.port),
            "--grpc-port",
            "-1",
            "--log-level",
            "warning",
            "--max-running-tasks",
            "0",
            "--max-open-contexts",
            "0",
            *self.extra,
        ]
        env = None if self.env is None else {**os.environ, **self.env}
        self.proc = await asyncio.create_subprocess_exec(*command, env=env)
        async with aiohttp.ClientSession() as session:
            for _ in range(600):
                try:
                    async with session.get(
                        f"http://127.0.0.1:{self.port}/.well-known/agent-card.json"
                    ):
                        return self
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
        raise RuntimeError("server did not start")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 60)


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = ordered[len(ordered) // 2] * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    return f"p50 {p50:.2f} ms, p99 {p99:.2f} ms (n={len(ordered)})"


async def list_page(
    session: aiohttp.ClientSession, base: str, params: dict[str, str]
) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    async with session.get(f"{base}/tasks", params=params, headers=HEADERS) as response:
        body = await response.read()
        took = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"ListTasks {response.status}: {body[:200]!r}")
    return took, json.loads(body)


async def bench_lists(server: Server, session: aiohttp.ClientSession, pages: int) -> list[str]:
    """ListTasks latency per page size and filter; returns some task ids for GetTask."""
    ids: list[str] = []
    filters: list[tuple[str, dict[str, str]]] = [
        ("no filter", {}),
        ("contextId", {"contextId": "ctx-00042"}),
        ("status", {"status": "TASK_STATE_FAILED"}),
    ]
    for name, flt in filters:
        for size in (10, 50, 100):
            samples: list[float] = []
            token = ""
            total = 0
            for _ in range(pages):
                params = {**flt, "pageSize": str(size)}
                if token:
                    params["pageToken"] = token
                took, body = await list_page(session, server.base, params)
                samples.append(took)
                total = body.get("totalSize", 0)
                ids.extend(t["id"] for t in body.get("tasks", [])[:2])
                token = body.get("nextPageToken", "")
            print(f"ListTasks {name:9} pageSize {size:3}: {percentiles(samples)} total {total}")
    return ids


async def bench_get(server: Server, session: aiohttp.ClientSession, ids: list[str]) -> None:
    samples = []
    for task_id in random.sample(ids, min(len(ids), 500)):
        start = time.perf_counter()
        async with session.get(f"{server.base}/tasks/{task_id}", headers=HEADERS) as response:
            await response.read()
            assert response.status == 200, response.status
        samples.append(time.perf_counter() - start)
    print(f"GetTask: {percentiles(samples)}")


async def walk(server: Server, session: aiohttp.ClientSession) -> None:
    start = time.perf_counter()
    token, seen, pages = "", 0, 0
    slowest = 0.0
    while True:
        params = {"pageSize": "100"}
        if token:
            params["pageToken"] = token
        took, body = await list_page(session, server.base, params)
        slowest = max(slowest, took)
        seen += len(body.get("tasks", []))
        pages += 1
        token = body.get("nextPageToken", "")
        if not token:
            break
    took = time.perf_counter() - start
    print(
        f"full walk: {seen:,} tasks in {pages:,} pages, {took:.1f} s"
        f" ({took / pages * 1000:.2f} ms/page, slowest {slowest * 1000:.1f} ms)"
    )


async def sends(server: Server, count: int, concurrency: int, text: str = "hi") -> float:
    counter = itertools.count()
    run = os.getpid()
    done = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while (n := next(counter)) < count:
            body = {
                "message": {
                    "messageId": f"bench-{run}-{n}",
                    "role": "ROLE_USER",
                    "parts": [{"text": text}],
                }
            }
            async with session.post(
                f"{server.base}/message:send", data=json.dumps(body), headers=HEADERS
            ) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"send {response.status}")
            done += 1

    start = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return done / (time.perf_counter() - start)


async def lists_main(args: argparse.Namespace) -> None:
    async with Server(Path(args.workspace), args.serve) as server:
        await asyncio.sleep(1)
        print(f"RSS at start: {rss_mib(server.pid):.1f} MiB")
        async with aiohttp.ClientSession() as session:
            await list_page(session, server.base, {"pageSize": "1"})  # first list
            print(f"RSS after the first ListTasks: {rss_mib(server.pid):.1f} MiB")
            ids = await bench_lists(server, session, args.pages)
            await bench_get(server, session, ids)
            if args.walk:
                await walk(server, session)
                print(f"RSS after the full walk: {rss_mib(server.pid):.1f} MiB")
        if args.sends:
            rate = await sends(server, args.sends, args.concurrency)
            print(f"blocking sends: {rate:,.0f}/s over {args.sends:,} (c={args.concurrency})")
            print(f"RSS after {args.sends:,} sends: {rss_mib(server.pid):.1f} MiB")
            async with aiohttp.ClientSession() as session:
                again = await bench_lists(server, session, args.pages // 4 or 1)
                del again


async def soak_main(args: argparse.Namespace) -> None:
    sizes = [1_000_000, 10_000_000]
    async with Server(Path(args.workspace), args.serve) as server:
        print(f"t=0 s RSS {rss_mib(server.pid):.1f} MiB")
        start = time.perf_counter()
        next_report = args.every
        n = 0
        connector = aiohttp.TCPConnector(limit=4)
        async with aiohttp.ClientSession(connector=connector) as session:
            while (elapsed := time.perf_counter() - start) < args.seconds:
                size = sizes[n % 2]
                n += 1
                body = {
                    "message": {
                        "messageId": f"soak-{os.getpid()}-{n}",
                        "role": "ROLE_USER",
                        "parts": [{"text": "x" * size}],
                    }
                }
                async with session.post(
                    f"{server.base}/message:send", data=json.dumps(body), headers=HEADERS
                ) as response:
                    answer = json.loads(await response.read())
                task_id = answer["task"]["id"]
                async with session.get(f"{server.base}/tasks/{task_id}", headers=HEADERS) as got:
                    await got.read()
                if elapsed >= next_report:
                    print(f"t={elapsed:.0f} s RSS {rss_mib(server.pid):.1f} MiB ({n} sends)")
                    sys.stdout.flush()
                    next_report += args.every
            for _ in range(3):  # a few listings of whole big tasks (byte-bounded pages)
                params = {"pageSize": "100", "includeArtifacts": "true"}
                took, body = await list_page(session, server.base, params)
                print(
                    f"ListTasks of big tasks: {len(body['tasks'])} tasks,"
                    f" token {'yes' if body.get('nextPageToken') else 'no'}, {took * 1000:.0f} ms"
                )
        print(f"end: RSS {rss_mib(server.pid):.1f} MiB after {n} sends and reads")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    lists = sub.add_parser("lists")
    lists.add_argument("workspace")
    lists.add_argument("--pages", type=int, default=200)
    lists.add_argument("--walk", action="store_true")
    lists.add_argument("--sends", type=int, default=0)
    lists.add_argument("--concurrency", type=int, default=16)
    soak = sub.add_parser("soak")
    soak.add_argument("workspace")
    soak.add_argument("--seconds", type=float, default=300)
    soak.add_argument("--every", type=float, default=10)
    for p in (lists, soak):
        p.add_argument("--serve", nargs=argparse.REMAINDER, default=[], help="extra serve flags")
    args = parser.parse_args()
    asyncio.run(lists_main(args) if args.what == "lists" else soak_main(args))


if __name__ == "__main__":
    main()
