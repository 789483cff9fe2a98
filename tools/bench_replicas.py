"""Replicas on PostgreSQL against one gateway on the file store, across real processes.

    .venv/bin/python -P tools/bench_replicas.py [--rounds 3] [--sends 2000] [--chunks 200]

Starts a throwaway PostgreSQL (``server/pg_local.py``, fsync off) and three
``a2a-gateway serve --faux`` processes: F on the file store, A and B on the database
(one shared workspace, the URL passed in the environment). Then, ``--rounds`` times,
alternating the order of the configurations from one round to the next:

- blocking SendMessage/s over HTTP+JSON (``--clients`` concurrent clients, unique
  messageIds, ``--sends`` per row): F; A alone; A and B with the client sending
  request n to replica n mod 2 (a round-robin balancer);
- stream events/s: ``--streams`` SendStreamingMessage ``chunks:N`` streams,
  ``--stream-clients`` at a time: F; A alone; A and B round-robin;
- delivery A -> B: a stream of ``chunks:N:MS`` (paced) on A and, once A's stream
  showed its first chunk, SubscribeToTask on B; for each chunk the delay between its
  arrival on A's stream and on B's subscription (one client, one clock), p50/p99/max
  over ``--delivery-runs`` runs a round; then the same with an unpaced ``chunks:N``
  burst. Every run is checked: B's snapshot plus its events must hold every chunk once,
  in order, then the completed status. In the paced runs a second subscriber joins on B
  ``--late-subscriber-ms`` later and is checked the same way (not timed). A lost,
  repeated or reordered chunk is printed as an error (exit status 1).
- a statement census: ``log_statement = all`` for 100 blocking sends from 4 clients,
  400 from ``--clients`` (as in the timed rows: group commit takes more calls a
  statement when more wait at once), and 5 ``chunks:200`` streams on A, the statements
  PostgreSQL ran per operation.

``--base REV`` adds a fourth gateway, A0, on the same database and workspace, running
revision REV of this repository (its package tree laid out as ``bench_compare.py``
does): a row of blocking sends on A0 alone in every round, interleaved with the others,
and a census of A0 too (a before/after of a change to the PostgreSQL store in one run).
``--sends-only`` leaves out the stream and delivery rows. ``--durable`` turns the
cluster's durability on (``fsync``, ``synchronous_commit``, ``full_page_writes``: a
commit waits for its WAL flush, as on a production database) and F's ``--fsync``, so
both stores answer a send once it is on the disk.

Each row prints the load average (1 min) before and after it, and the CPU time per
operation of the gateway processes, of PostgreSQL (every backend, exited ones
included) and of this client, from /proc: on a shared machine the rates move with the
load, the CPU per operation much less. The workspaces and the cluster's folder are
under ``--root`` (default /work/bench-pg), removed at the start of a run.
Measurements for docs/performance.md, never tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tasks import HEADERS, Server

from a2a_gateway.server.pg_local import LocalPostgres

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of a process (plus its waited-for children)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # fields[0] is field 3 (state): utime is 14, stime 15, cutime 16, cstime 17.
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])
    return used / TICKS


def _postgres_cpu_s(postmaster: int) -> float:
    """The postmaster, its live children and the ones that exited."""
    total = _cpu_s(postmaster, children=True)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == postmaster:
            total += _cpu_s(int(entry))
    return total


@dataclass
class Meter:
    """CPU seconds of the gateways, PostgreSQL and this client over one row."""

    gateways: list[int]
    postmaster: int

    def sample(self) -> tuple[float, float, float]:
        times = os.times()
        return (
            sum(_cpu_s(pid) for pid in self.gateways),
            _postgres_cpu_s(self.postmaster),
            times.user + times.system,
        )


@dataclass
class Row:
    name: str
    unit: str
    values: list[float] = field(default_factory=list)
    cpu: list[tuple[float, float, float]] = field(default_factory=list)  # us per op
    loads: list[tuple[float, float]] = field(default_factory=list)


def _message(message_id: str, text: str) -> str:
    return json.dumps(
        {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}
    )


async def blocking_sends(servers: list[Server], count: int, clients: int, tag: str) -> int:
    """``count`` blocking sends, request n to ``servers[n % len(servers)]``."""
    counter = itertools.count()

    async def client(session: aiohttp.ClientSession) -> None:
        while (n := next(counter)) < count:
            server = servers[n % len(servers)]
            async with session.post(
                f"{server.base}/message:send",
                data=_message(f"{tag}-{n}", "hi"),
                headers=HEADERS,
            ) as response:
                body = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"send {response.status}: {body[:200]!r}")
                if json.loads(body)["task"]["status"]["state"] != "TASK_STATE_COMPLETED":
                    raise RuntimeError(f"send not completed: {body[:200]!r}")

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return count


async def sse(response: aiohttp.ClientResponse) -> Any:
    """The JSON of each SSE ``data:`` line (an ``event: error`` raises)."""
    kind = ""
    async for raw in response.content:
        line = raw.rstrip(b"\r\n")
        if line.startswith(b"event:"):
            kind = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            if kind == "error":
                raise RuntimeError(f"stream error: {line[5:200]!r}")
            yield json.loads(line[5:])
        elif not line:
            kind = ""


_CHUNK = re.compile(r"chunk-(\d+)")


def _chunk_texts(event: dict[str, Any]) -> list[str]:
    update = event.get("artifactUpdate")
    if update is None:
        return []
    return [p["text"] for p in update["artifact"].get("parts", []) if "text" in p]


async def stream_events(
    servers: list[Server], streams: int, chunks: int, clients: int, tag: str
) -> int:
    """Events read from ``streams`` ``chunks:N`` streams, stream n on server n mod len."""
    counter = itertools.count()
    events = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal events
        while (n := next(counter)) < streams:
            server = servers[n % len(servers)]
            seen = 0
            state = ""
            async with session.post(
                f"{server.base}/message:stream",
                data=_message(f"{tag}-{n}", f"chunks:{chunks}"),
                headers=HEADERS,
            ) as response:
                if response.status != 200:
                    raise RuntimeError(f"stream {response.status}")
                async for event in sse(response):
                    events += 1
                    seen += len(_chunk_texts(event))
                    state = event.get("statusUpdate", {}).get("status", {}).get("state", state)
            if seen != chunks or state != "TASK_STATE_COMPLETED":
                raise RuntimeError(f"stream {n}: {seen}/{chunks} chunks, last state {state!r}")

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return events


async def paced_form_works(server: Server) -> bool:
    """Whether the faux agent reads ``chunks:N:MS`` (three chunks, not one)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{server.base}/message:stream",
            data=_message(f"probe-{time.time_ns()}", "chunks:3:1"),
            headers=HEADERS,
        ) as response,
    ):
        return sum([len(_chunk_texts(e)) async for e in sse(response)]) == 3


@dataclass
class Delivery:
    delays_ms: list[float] = field(default_factory=list)
    before_subscribe: int = 0  # chunks already in B's snapshot
    errors: list[str] = field(default_factory=list)


async def delivery_run(
    a: Server, b: Server, text: str, chunks: int, tag: str, late_s: float | None = None
) -> Delivery:
    """One run streamed on A and subscribed to on B (see the module docstring); with
    ``late_s``, a second subscriber on B that joins that much later (checked, not timed)."""
    on_a: dict[int, float] = {}
    on_b: dict[int, float] = {}
    result = Delivery()
    started = asyncio.get_running_loop().create_future()

    async def read_a(session: aiohttp.ClientSession) -> None:
        async with session.post(
            f"{a.base}/message:stream", data=_message(tag, text), headers=HEADERS
        ) as response:
            task_id = ""
            async for event in sse(response):
                now = time.perf_counter()
                task_id = task_id or event.get("task", {}).get("id", "")
                for chunk in _chunk_texts(event):
                    on_a[int(chunk.removeprefix("chunk-"))] = now
                    if not started.done():
                        started.set_result(task_id)
        if not started.done():
            started.set_exception(RuntimeError("A's stream ended without a chunk"))

    async def read_b(session: aiohttp.ClientSession, late: float | None = None) -> None:
        task_id = await started
        if late is not None:
            await asyncio.sleep(late)
        who = "B" if late is None else f"B's subscriber {late * 1000:.0f} ms later"
        timed = on_b if late is None else {}
        order: list[int] = []
        state = ""
        async with session.get(f"{b.base}/tasks/{task_id}:subscribe", headers=HEADERS) as resp:
            if resp.status != 200:  # e.g. the run ended before the subscription
                result.errors.append(
                    f"{tag}: subscribe {resp.status}: {(await resp.read())[:120]!r}"
                )
                return
            async for event in sse(resp):
                now = time.perf_counter()
                if "task" in event:  # the snapshot: chunks so far in its artifact
                    for artifact in event["task"].get("artifacts", []):
                        texts = [p["text"] for p in artifact.get("parts", []) if "text" in p]
                        # (streamed text is stored as one part: chunk-0chunk-1...)
                        order.extend(int(n) for t in texts for n in _CHUNK.findall(t))
                    if late is None:
                        result.before_subscribe = len(order)
                    continue
                for chunk in _chunk_texts(event):
                    index = int(chunk.removeprefix("chunk-"))
                    order.append(index)
                    if index in timed:
                        result.errors.append(f"{tag}: chunk {index} twice on {who}")
                    timed[index] = now
                state = event.get("statusUpdate", {}).get("status", {}).get("state", state)
        if order != list(range(chunks)):
            missing = sorted(set(range(chunks)) - set(order))
            result.errors.append(
                f"{tag}: {who} saw {len(order)} chunks, {len(missing)} missing"
                f" (first {missing[:5]}), in order: {order == sorted(order)}"
            )
        if state != "TASK_STATE_COMPLETED":
            result.errors.append(f"{tag}: {who}: last state {state!r}")

    async with aiohttp.ClientSession() as session:
        async with asyncio.timeout(120):
            readers = [read_a(session), read_b(session)]
            if late_s is not None:
                readers.append(read_b(session, late_s))
            await asyncio.gather(*readers)
    result.delays_ms = [(on_b[i] - on_a[i]) * 1000 for i in sorted(on_b) if i in on_a]
    return result


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def timed_row(
    row: Row, meter: Meter, ops_unit: str, work: Callable[[], Awaitable[int]]
) -> None:
    load_before = os.getloadavg()[0]
    cpu_before = meter.sample()
    start = time.perf_counter()
    ops = await work()
    took = time.perf_counter() - start
    cpu_after = meter.sample()
    load_after = os.getloadavg()[0]
    rate = ops / took
    per_op = tuple(
        (after - before) / ops * 1e6 for before, after in zip(cpu_before, cpu_after, strict=True)
    )
    row.values.append(rate)
    row.cpu.append(per_op)  # type: ignore[arg-type]
    row.loads.append((load_before, load_after))
    print(
        f"{row.name:38} {rate:9,.0f} {ops_unit}/s  cpu/op gw {per_op[0]:6.0f} us"
        f" pg {per_op[1]:6.0f} us client {per_op[2]:6.0f} us"
        f"  load {load_before:.2f} -> {load_after:.2f}",
        flush=True,
    )


async def statement_census(
    pg: LocalPostgres, a: Server, sends: int, streams: int, label: str = "A", clients: int = 16
) -> None:
    """The statements PostgreSQL executes per blocking send and per ``chunks:200`` stream
    on one gateway (``log_statement = all`` for the time of it; outside every timed row);
    no streams with ``streams`` 0."""
    assert pg.folder is not None
    log_path = pg.folder / "server.log"
    connection = await asyncpg.connect(pg.url)
    try:
        await connection.execute("ALTER SYSTEM SET log_statement = 'all'")
        await connection.execute("SELECT pg_reload_conf()")
        await asyncio.sleep(1)  # backends read the configuration at their next command
        censuses: list[tuple[str, Callable[[], Awaitable[int]], int]] = [
            (
                "blocking send (4 clients)",
                lambda: blocking_sends([a], sends, 4, f"census-{time.time_ns()}"),
                sends,
            ),
            (
                f"blocking send ({clients} clients)",
                lambda: blocking_sends([a], 4 * sends, clients, f"census-{time.time_ns()}"),
                4 * sends,
            ),
            (
                "chunks:200 stream",
                lambda: stream_events([a], streams, 200, 2, f"census-{time.time_ns()}"),
                streams,
            ),
        ]
        for what, work, count in censuses[: 3 if streams else 2]:
            offset = log_path.stat().st_size
            await work()
            await asyncio.sleep(1)  # the event writer and the lease loop finish their statements
            with log_path.open("rb") as log:
                log.seek(offset)
                lines = log.read().decode(errors="replace").splitlines()
            kinds: dict[str, int] = defaultdict(int)
            joined: list[str] = []
            for line in lines:  # a statement's own line breaks continue on indented lines
                if joined and line[:1] in ("\t", " "):
                    joined[-1] += " " + line
                else:
                    joined.append(line)
            for line in joined:
                for marker in ("statement: ", "execute "):
                    at = line.find(marker)
                    if at < 0 or "LOG:" not in line[:at]:
                        continue
                    sql = line[at + len(marker) :]
                    if marker == "execute ":
                        sql = sql.split(": ", 1)[-1]
                    kinds[" ".join(sql.split())[:70]] += 1
                    break
            total = sum(kinds.values())
            print(f"{label}: statements per {what}: {total / count:.1f} ({total} over {count})")
            for sql, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
                print(f"  {n / count:5.2f}  {sql}")
    finally:
        await connection.execute("ALTER SYSTEM RESET log_statement")
        await connection.execute("SELECT pg_reload_conf()")
        await connection.close()


def fresh_folder(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    root.chmod(0o755)  # as root, the cluster's folder below it belongs to another user


async def main(args: argparse.Namespace) -> None:
    root = Path(args.root)
    fresh_folder(root)
    print(f"load before start: {os.getloadavg()}", flush=True)
    base_env = None
    if args.base:
        from bench_compare import package_tree, resolve

        base_env = {"PYTHONPATH": str(package_tree(resolve(args.base)))}
    with LocalPostgres(parent=root, durable=args.durable) as pg:
        assert pg.pid is not None
        if args.durable:
            conn = await asyncpg.connect(pg.url)
            try:
                shown = [await conn.fetchval(f"SHOW {s}") for s in ("fsync", "synchronous_commit")]
                print(f"durable: fsync {shown[0]}, synchronous_commit {shown[1]}", flush=True)
            finally:
                await conn.close()
        async with Server(root / "files", ["--fsync"] if args.durable else []) as f:
            os.environ["A2A_GATEWAY_DATABASE_URL"] = pg.url  # kept out of argv
            pg_flags = ["--store", "postgres"]
            async with (
                Server(root / "pg", pg_flags) as a,
                Server(root / "pg", pg_flags) as b,
                (
                    Server(root / "pg", pg_flags, base_env)
                    if base_env is not None
                    else contextlib.nullcontext()
                ) as a0,
            ):
                errors = await run_rounds(args, pg.pid, f, a, b, a0)
                if args.census:
                    streams = 0 if args.sends_only else 5
                    await statement_census(pg, a, 100, streams, "A", args.clients)
                    if a0 is not None:
                        await statement_census(
                            pg, a0, 100, streams, f"A0 ({args.base})", args.clients
                        )
    if errors:
        raise SystemExit(1)


@dataclass
class DeliveryRow:
    name: str
    text: str
    chunks: int
    runs: int
    late_s: float | None = None
    rounds: list[Delivery] = field(default_factory=list)  # one merged Delivery a round


async def delivery_row(row: DeliveryRow, a: Server, b: Server, tag: str) -> list[str]:
    load_before = os.getloadavg()[0]
    merged = Delivery()
    for n in range(row.runs):
        done = await delivery_run(a, b, row.text, row.chunks, f"{tag}-{n}", row.late_s)
        merged.delays_ms.extend(done.delays_ms)
        merged.before_subscribe += done.before_subscribe
        merged.errors.extend(done.errors)
    load_after = os.getloadavg()[0]
    row.rounds.append(merged)
    delays = sorted(merged.delays_ms)
    if delays:
        print(
            f"{row.name:38} p50 {_pct(delays, 0.5):6.2f} ms p99 {_pct(delays, 0.99):6.2f} ms"
            f" max {delays[-1]:6.2f} ms (n={len(delays)}, {merged.before_subscribe} chunks"
            f" in snapshots)  load {load_before:.2f} -> {load_after:.2f}",
            flush=True,
        )
    return merged.errors


async def run_rounds(
    args: argparse.Namespace, postmaster: int, f: Server, a: Server, b: Server, a0: Server | None
) -> list[str]:
    """Every row ``--rounds`` times (the order reversed every other round); the errors."""
    everyone = [f, a, b] + ([a0] if a0 is not None else [])
    meter = Meter([s.pid for s in everyone], postmaster)
    run = os.getpid()
    for n, servers in enumerate(([f], [a, b], [a0] if a0 is not None else [])):  # a warm-up
        if servers:  # (connections and caches)
            await blocking_sends(servers, 200, 8, f"warm-{run}-{n}")
            if not args.sends_only:
                await stream_events(servers, 8, 50, 4, f"warm-{run}-{n}")
    if not args.sends_only and not await paced_form_works(a):
        raise SystemExit("the faux agent has no chunks:N:MS (paced) form")
    sends = {
        "send, file store, 1 gateway": [f],
        "send, postgres, 1 gateway": [a],
        "send, postgres, 2 gateways round-robin": [a, b],
    }
    if a0 is not None:
        sends[f"send, postgres, 1 gateway ({args.base})"] = [a0]
    streams = {
        "stream, file store, 1 gateway": [f],
        "stream, postgres, 1 gateway": [a],
        "stream, postgres, 2 gateways round-robin": [a, b],
    }
    deliveries = [
        DeliveryRow(
            f"delivery A->B, 1 chunk / {args.paced_ms} ms",
            f"chunks:{args.delivery_chunks}:{args.paced_ms}",
            args.delivery_chunks,
            args.delivery_runs,
            args.late_subscriber_ms / 1000 if args.late_subscriber_ms > 0 else None,
        ),
        DeliveryRow(
            "delivery A->B, unpaced burst",
            f"chunks:{args.burst_chunks}",
            args.burst_chunks,
            1,
        ),
    ]
    rows: dict[str, Row] = {}
    errors: list[str] = []
    for round_no in range(args.rounds):
        order = 1 if round_no % 2 == 0 else -1
        print(f"-- round {round_no + 1}", flush=True)
        for name, servers in list(sends.items())[::order]:
            row = rows.setdefault(name, Row(name, "sends"))
            tag = f"s{run}-{round_no}-{name}"

            async def send_work(s: list[Server] = servers, t: str = tag) -> int:
                return await blocking_sends(s, args.sends, args.clients, t)

            await timed_row(row, meter, "sends", send_work)
        if args.sends_only:
            continue
        for name, servers in list(streams.items())[::order]:
            row = rows.setdefault(name, Row(name, "events"))
            tag = f"e{run}-{round_no}-{name}"

            async def stream_work(s: list[Server] = servers, t: str = tag) -> int:
                return await stream_events(s, args.streams, args.chunks, args.stream_clients, t)

            await timed_row(row, meter, "events", stream_work)
        for number, delivery in enumerate(deliveries):
            errors += await delivery_row(delivery, a, b, f"d{run}-{round_no}-{number}")

    print("\n-- summary: each round's value; CPU per op (median of the rounds)")
    print("| row | per round | CPU/op gateways / PostgreSQL / client | load 1 min (before-after) |")
    for row in rows.values():
        values = ", ".join(f"{v:,.0f}" for v in row.values)
        cpu = [statistics.median(c[i] for c in row.cpu) for i in range(3)]
        loads = ", ".join(f"{lo:.1f}-{hi:.1f}" for lo, hi in row.loads)
        cpu_text = f"{cpu[0]:.0f} / {cpu[1]:.0f} / {cpu[2]:.0f} us"
        print(f"| {row.name} | {values} {row.unit}/s | {cpu_text} | {loads} |")
    file_row = rows.get("send, file store, 1 gateway")
    for name, row in rows.items():
        if file_row is None or row is file_row or row.unit != "sends":
            continue
        ratios = [v / f for v, f in zip(row.values, file_row.values, strict=True)]
        print(
            f"{name} / file store, per round: {', '.join(f'{r:.2f}' for r in ratios)};"
            f" median {statistics.median(ratios):.2f}"
        )
    for delivery in deliveries:
        every = sorted(d for r in delivery.rounds for d in r.delays_ms)
        if not every:
            continue
        p50s = ", ".join(
            f"{_pct(sorted(r.delays_ms), 0.5):.2f}" for r in delivery.rounds if r.delays_ms
        )
        p99s = ", ".join(
            f"{_pct(sorted(r.delays_ms), 0.99):.2f}" for r in delivery.rounds if r.delays_ms
        )
        print(
            f"{delivery.name} ({delivery.text} x {delivery.runs} a round): all rounds p50"
            f" {_pct(every, 0.5):.2f} ms, p99 {_pct(every, 0.99):.2f} ms, max {every[-1]:.2f} ms"
            f" over {len(every)} events; per round p50 {p50s}; p99 {p99s}"
        )
    print(f"errors (lost, repeated or reordered chunks, failed subscriptions): {len(errors)}")
    for error in errors:
        print(f"  {error}")
    return errors


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="/work/bench-pg")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sends", type=int, default=2000, help="blocking sends per row")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--streams", type=int, default=60, help="streams per row")
    parser.add_argument("--chunks", type=int, default=200, help="chunks per stream")
    parser.add_argument("--stream-clients", type=int, default=8)
    parser.add_argument("--delivery-runs", type=int, default=2, help="paced runs per round")
    parser.add_argument("--delivery-chunks", type=int, default=1000)
    parser.add_argument("--paced-ms", type=int, default=2)
    parser.add_argument("--burst-chunks", type=int, default=2000)
    parser.add_argument(
        "--late-subscriber-ms",
        type=float,
        default=200,
        help="a second subscriber on B this much later in the paced runs (0: none)",
    )
    parser.add_argument("--census", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--base", help="a revision whose gateway A0 runs a row of its own")
    parser.add_argument("--sends-only", action="store_true", help="no stream or delivery rows")
    parser.add_argument(
        "--durable", action="store_true", help="the cluster's fsync and F's --fsync on"
    )
    asyncio.run(main(parser.parse_args()))
