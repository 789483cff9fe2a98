"""asyncpg vs psycopg 3 (async) on the task store's workload, on a throwaway cluster.

Per driver: insert N task rows (~1 KiB protobuf bytes each), update each (a new state
and timestamp), select each by id, then ListTasks-shaped range queries (one owner's
newest 50 after a cursor). Once over a single connection (one statement at a time),
once over a pool of 4 with 16 concurrent callers. Prints ops/s and the client's
CPU time per op (steadier than ops/s on a loaded host) per phase; also the
cost of the two task encodings (protobuf bytes vs ProtoJSON) per task.

    .venv/bin/python -P tools/bench_pg_driver.py [N]
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import psycopg
import psycopg_pool
from google.protobuf import json_format

from a2a_gateway.server.pg_local import LocalPostgres
from lf.a2a.v1 import a2a_pb2 as pb

DDL = """
DROP TABLE IF EXISTS bench_tasks;
CREATE TABLE bench_tasks(task_id text PRIMARY KEY, workspace text NOT NULL,
  caller text NOT NULL, context_id text NOT NULL, state smallint NOT NULL,
  ts bigint NOT NULL, task bytea NOT NULL);
CREATE INDEX bench_by_owner ON bench_tasks(workspace, caller, ts DESC, task_id DESC);
"""
INSERT = "INSERT INTO bench_tasks VALUES ({})"
UPDATE = "UPDATE bench_tasks SET state = {}, ts = {}, task = {} WHERE task_id = {}"
SELECT = "SELECT task FROM bench_tasks WHERE task_id = {}"
RANGE = (
    "SELECT task_id, context_id, state, ts FROM bench_tasks WHERE workspace = {} AND caller = {}"
    " AND (ts, task_id) < ({}, {}) ORDER BY ts DESC, task_id DESC LIMIT 50"
)


def sample_task(i: int) -> pb.Task:
    task = pb.Task(id=f"task-{i:08d}", context_id=f"ctx-{i % 97}")
    task.status.state = pb.TASK_STATE_COMPLETED
    task.status.timestamp.FromNanoseconds(1_700_000_000_000_000_000 + i)
    for role, text in ((pb.ROLE_USER, "hello " * 40), (pb.ROLE_AGENT, "answer " * 80)):
        message = task.history.add(message_id=f"m-{i}-{role}", role=role)
        message.parts.add(text=text)
    return task


def encodings(n: int = 2000) -> None:
    tasks = [sample_task(i) for i in range(n)]
    for name, encode, decode in (
        ("protobuf bytes", lambda t: t.SerializeToString(), pb.Task.FromString),
        (
            "ProtoJSON",
            lambda t: json_format.MessageToJson(t, indent=None).encode(),
            lambda b: json_format.Parse(b, pb.Task()),
        ),
    ):
        start = time.perf_counter()
        blobs = [encode(t) for t in tasks]
        mid = time.perf_counter()
        for blob in blobs:
            decode(blob)
        end = time.perf_counter()
        size = sum(len(b) for b in blobs) / n
        print(
            f"  {name:15} {size:6.0f} B/task  encode {(mid - start) / n * 1e6:5.1f} us"
            f"  decode {(end - mid) / n * 1e6:5.1f} us"
        )


Exec = Callable[[str, Sequence[Any]], Awaitable[Any]]


Step = Callable[[Exec, int], Awaitable[None]]


async def phases(run: Callable[[Step, int], Awaitable[float]], n: int) -> dict[str, float]:
    blobs = [sample_task(i).SerializeToString() for i in range(n)]

    async def insert(ex: Exec, i: int) -> None:
        await ex("insert", (f"task-{i:08d}", "/ws", "alice", f"ctx-{i % 97}", 3, i, blobs[i]))

    async def update(ex: Exec, i: int) -> None:
        await ex("update", (4, i + n, blobs[i], f"task-{i:08d}"))

    async def select(ex: Exec, i: int) -> None:
        await ex("select", (f"task-{i:08d}",))

    async def range_query(ex: Exec, i: int) -> None:
        await ex("range", ("/ws", "alice", n + (i * 7919) % n, "~"))

    return {
        name: n / await run(step, n)
        for name, step in (
            ("insert", insert),
            ("update", update),
            ("select", select),
            ("range", range_query),
        )
    }


def sql_for(style: str) -> dict[str, str]:
    def marks(k: int) -> list[str]:
        return [f"${j}" for j in range(1, k + 1)] if style == "$" else ["%s"] * k

    return {
        "insert": INSERT.format(", ".join(marks(7))),
        "update": UPDATE.format(*marks(4)),
        "select": SELECT.format(*marks(1)),
        "range": RANGE.format(*marks(4)),
    }


async def bench_asyncpg(url: str, n: int, pool_size: int, callers: int) -> dict[str, float]:
    sql = sql_for("$")
    conn = await asyncpg.connect(url)
    await conn.execute(DDL)
    await conn.close()
    pool = await asyncpg.create_pool(url, min_size=pool_size, max_size=pool_size)

    async def run(step: Callable[[Exec, int], Awaitable[None]], count: int) -> float:
        async def one(i: int) -> None:
            async with pool.acquire() as c:
                await step(lambda k, args: c.fetch(sql[k], *args), i)

        return await drive(one, count, callers)

    try:
        return await phases(run, n)
    finally:
        await pool.close()


async def bench_psycopg(url: str, n: int, pool_size: int, callers: int) -> dict[str, float]:
    sql = sql_for("%")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(DDL)  # type: ignore[arg-type]
    pool = psycopg_pool.AsyncConnectionPool(
        url,
        min_size=pool_size,
        max_size=pool_size,
        kwargs={"autocommit": True, "prepare_threshold": 0},
        open=False,
    )
    await pool.open(wait=True)

    async def run(step: Callable[[Exec, int], Awaitable[None]], count: int) -> float:
        async def one(i: int) -> None:
            async with pool.connection() as c:

                async def ex(k: str, args: Sequence[Any]) -> Any:
                    cur = await c.execute(sql[k], args)  # type: ignore[arg-type]
                    return await cur.fetchall() if cur.description else None

                await step(ex, i)

        return await drive(one, count, callers)

    try:
        return await phases(run, n)
    finally:
        await pool.close()


async def drive(one: Callable[[int], Awaitable[None]], count: int, callers: int) -> float:
    queue = iter(range(count))

    async def worker() -> None:
        for i in queue:
            await one(i)

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(callers)))
    CPU.append(time.process_time() - cpu)
    return time.perf_counter() - start


CPU: list[float] = []  # client CPU seconds of each phase, in order


async def main(n: int) -> None:
    print("task encodings (2,000 tasks):")
    encodings()
    with LocalPostgres() as pg:
        for label, pool_size, callers in (("1 connection", 1, 1), ("pool 4, 16 callers", 4, 16)):
            for driver, bench in (("asyncpg", bench_asyncpg), ("psycopg", bench_psycopg)):
                CPU.clear()
                rates = await bench(pg.url, n, pool_size, callers)
                figures = "  ".join(
                    f"{k} {v:6.0f}/s {cpu / n * 1e6:4.0f} us"
                    for (k, v), cpu in zip(rates.items(), CPU, strict=True)
                )
                print(f"{label:20} {driver:8} {figures}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
