"""Two replicas on one PostgreSQL database, whole scenarios of docs/reliability.md:

- A (a real process) gets SIGTERM while a blocking ``hold:3`` send and a stream of a
  paced ``chunks:`` run are open on it: the send completes, the stream ends with the
  resumable UNAVAILABLE, resuming it on B (in this process, on each binding) from the
  last event id seen gives every later event A logged once and the run's final status
  (failed "shut down": A's drain stopped the run), and A exits 0.
- The database is stopped by its pid and started again while a run on A streams: a
  follower on B (our own resumable client) gets every chunk once, in order, and the
  final status, never a false "stopped".
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import grpc
import pytest

from a2a_gateway.client import connect, resumable_stream, send_request
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.errors import A2AError
from a2a_gateway.protocol.resume import EVENT_ID_KEY, RESUME_EXTENSION
from a2a_gateway.serve import Gateway
from a2a_gateway.server.engine.state import RUN_LOST, SHUTDOWN
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.settings import resolve
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.secrets import use_secret

from .conftest import BINDINGS, KEY_ALICE, Driver, WireError
from .test_postgres_store import alices_workspace, database, settings  # noqa: F401 (a fixture)
from .test_resume import PAYLOADS, chunk_texts, last_id, resume_from
from .test_scenarios import COMPLETED, send
from .test_shutdown import _until_working, serving

FAILED = "TASK_STATE_FAILED"
OUTAGE_CHUNKS = 100  # 50 ms apart: the run outlasts the ~2 s outage


async def _logged(url: str, task_id: str) -> list[tuple[int, dict[str, Any]]]:
    """The task's events in the database's event log, in order: (seq, event)."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT seq, event FROM a2a_events WHERE task_id = $1 ORDER BY seq", task_id
        )
    finally:
        await conn.close()
    return [(int(r["seq"]), codec.to_dict(pb.StreamResponse.FromString(r["event"]))) for r in rows]


async def test_sigterm_on_a_replica_resumes_its_stream_on_the_other(
    tmp_path: Path,
    database: str,  # noqa: F811 (the fixture)
) -> None:
    """A blocking ``hold:3`` send and a stream of a ``chunks:`` run that outlasts it,
    both on A; SIGTERM A after a few chunks."""
    workspace = alices_workspace(tmp_path)
    flags = ("--store", "postgres", "--database-url", database, "--shutdown-grace", "30")
    b = Gateway(resolve(settings(workspace, database), environ={}))
    await b.start()
    try:
        async with (
            serving(tmp_path, *flags) as served,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http,
            grpc.aio.insecure_channel(served.grpc_target) as channel_a,
            grpc.aio.insecure_channel(f"127.0.0.1:{b.grpc_port}") as channel_b,
        ):
            on_a = Driver("jsonrpc", http, served.base, channel_a)
            held = asyncio.create_task(on_a.call("SendMessage", _held("held")))
            streamed = Driver("jsonrpc", http, served.base, channel_a)
            streamed.extra = {"A2A-Extensions": RESUME_EXTENSION}
            stream = streamed.open_stream("SendStreamingMessage", send("chunks:400:25"))
            seen: list[dict[str, Any]] = []
            ids: list[str] = []
            async for event in stream:
                seen.append(event)
                ids.append(last_id(streamed, event))
                if len(chunk_texts(seen)) >= 5:
                    break
            await _until_working(on_a, "held")
            served.process.send_signal(signal.SIGTERM)
            with pytest.raises(WireError) as ended:
                async with asyncio.timeout(30):
                    async for event in stream:
                        seen.append(event)
                        ids.append(last_id(streamed, event))
            assert ended.value.reason == "UNAVAILABLE"  # the resumable close
            answer = await held
            assert answer["task"]["status"]["state"] == COMPLETED
            assert await served.exit_status() == 0

            task_id = seen[0]["task"]["id"]
            resumed = {}  # on each binding of B, from the last event id seen on A
            for binding in BINDINGS:
                on_b = Driver(binding, http, f"http://127.0.0.1:{b.http_port}", channel_b)
                resume_from(on_b, ids[-1])
                resumed[binding] = _with_ids(
                    on_b, await on_b.stream("SubscribeToTask", {"id": task_id})
                )
    finally:
        await b.stop()
    log = served.log.read_text()
    assert "draining" in log and "grace ran out" not in log
    last_seen = int(ids[-1].rpartition(":")[2])
    later = [(seq, event) for seq, event in await _logged(database, task_id) if seq > last_seen]
    assert len(later) >= 1  # at least the run's final status
    want = [(f"{task_id}:{seq}", event) for seq, event in later]
    for binding in BINDINGS:  # every later event A logged, once, in order
        assert resumed[binding] == want, binding
    events = [event for _, event in want]
    assert not any("task" in event for event in events)  # nothing missed: no snapshot
    chunks = chunk_texts(seen + events)
    assert chunks == [f"chunk-{n}" for n in range(len(chunks))]
    # A's drain stopped the run where it stood (it outlasts the blocking send): B
    # reports it failed "shut down", not the lost-run message of a vanished runner.
    final = events[-1]["statusUpdate"]["status"]
    assert final["state"] == FAILED
    assert final["message"]["parts"][0]["text"] == SHUTDOWN
    assert RUN_LOST not in str(events)


def _with_ids(driver: Driver, events: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(id, event) of each event of a resumed stream, the id taken out of a gRPC
    event's metadata (SSE carries it beside the event)."""
    if driver.binding != "grpc":
        return [(str(i), e) for i, e in zip(driver.event_ids, events, strict=True)]
    found = []
    for event in events:
        payload = event[next(k for k in PAYLOADS if k in event)]
        event_id = payload["metadata"].pop(EVENT_ID_KEY)
        if not payload["metadata"]:
            del payload["metadata"]
        found.append((event_id, event))
    return found


async def test_a_follower_on_b_of_a_run_on_a_gets_every_chunk_across_a_database_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``chunks:`` run on A, followed on B with our resumable client (as the CLI's
    ``subscribe``); the database is stopped by its pid for ~2 s mid-run, then started."""
    pg = LocalPostgres()  # the test's own cluster: it is stopped and started here
    await asyncio.to_thread(pg.start)
    use_secret(pg.password)
    workspace = alices_workspace(tmp_path)
    gateways = [Gateway(resolve(settings(workspace, pg.url), environ={})) for _ in range(2)]
    # The follower may resume (its stream ended UNAVAILABLE) or ride the outage out.
    resumes: list[tuple[str, A2AError | None]] = []
    events: list[pb.StreamResponse] = []
    try:
        for gateway in gateways:
            await gateway.start()
        a, b = (f"http://127.0.0.1:{gateway.http_port}" for gateway in gateways)
        async with (
            await connect(a, key=KEY_ALICE, transport="jsonrpc") as on_a,
            await connect(b, key=KEY_ALICE, transport="jsonrpc") as on_b,
        ):
            request = send_request(f"chunks:{OUTAGE_CHUNKS}:50", return_immediately=True)
            task_id = (await on_a.send_message(request)).task.id
            subscribe = pb.SubscribeToTaskRequest(id=task_id)
            follower = resumable_stream(
                lambda context: on_b.subscribe_to_task(subscribe, context),
                on_b.subscribe_to_task,
                until_interrupted=False,
                on_resume=lambda event_id, why: resumes.append((event_id, why)),
            )
            mid_run = asyncio.Event()
            outage = asyncio.create_task(_restart(pg, mid_run, events))
            try:
                async with asyncio.timeout(90), contextlib.aclosing(follower):
                    async for event in follower:
                        events.append(event)
                        if len(_chunks(events)) == 5:
                            mid_run.set()
                back_at = await outage
            finally:
                outage.cancel()
                await asyncio.gather(outage, return_exceptions=True)
    finally:
        for gateway in gateways:
            await gateway.stop()
        await asyncio.to_thread(pg.stop)
    assert back_at < OUTAGE_CHUNKS, "the follower had every chunk before the database was back"
    assert _chunks(events) == [f"chunk-{n}" for n in range(OUTAGE_CHUNKS)], resumes
    final = events[-1].status_update.status
    assert final.state == pb.TASK_STATE_COMPLETED
    assert RUN_LOST not in str(events)
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def _restart(
    pg: LocalPostgres, mid_run: asyncio.Event, events: list[pb.StreamResponse]
) -> int:
    """Once ``mid_run``, stop the database by its pid and start it again ~2 s later:
    how many chunks ``events`` held by then."""
    await mid_run.wait()
    await asyncio.to_thread(pg.stop_server)
    await asyncio.sleep(2.0)
    await asyncio.to_thread(pg.start_server)
    return len(_chunks(events))


def _chunks(events: list[pb.StreamResponse]) -> list[str]:
    """The chunks the events hold: those of a snapshot (stored as one text part), then
    each artifact update's."""
    chunks: list[str] = []
    for event in events:
        if event.HasField("task"):
            text = "".join(p.text for a in event.task.artifacts for p in a.parts)
            chunks += ["chunk-" + rest for rest in text.split("chunk-")[1:]]
        elif event.HasField("artifact_update"):
            chunks += [p.text for p in event.artifact_update.artifact.parts]
    return chunks


def _held(context_id: str) -> dict[str, Any]:
    request = send("hold:3")
    request["message"]["contextId"] = context_id
    return request
