"""Two replicas on one PostgreSQL database, whole scenarios of docs/reliability.md:

- A (a real process) gets SIGTERM while a blocking ``hold:3`` send and a stream of a
  paced ``chunks:`` run are open on it: the send completes, the stream ends with the
  resumable UNAVAILABLE, resuming it on B (in this process) from the last event id seen
  gives every later event A logged once and the run's final status, and A exits 0.
- The database is stopped by its pid and started again while a run on A streams: a
  follower on B (our own resumable client) gets every chunk once, in order, and the
  final status, never a false "stopped".
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import grpc
import pytest

from a2a_gateway.protocol import codec
from a2a_gateway.protocol.resume import RESUME_EXTENSION
from a2a_gateway.serve import Gateway
from a2a_gateway.server.engine.state import RUN_LOST, SHUTDOWN
from a2a_gateway.settings import resolve
from lf.a2a.v1 import a2a_pb2 as pb

from .conftest import Driver, WireError
from .test_postgres_store import alices_workspace, database, settings  # noqa: F401 (a fixture)
from .test_resume import chunk_texts, last_id, resume_from
from .test_scenarios import COMPLETED, send
from .test_shutdown import _until_working, serving

FAILED = "TASK_STATE_FAILED"


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
            on_b = Driver("jsonrpc", http, f"http://127.0.0.1:{b.http_port}", channel_b)
            resume_from(on_b, ids[-1])
            resumed = await on_b.stream("SubscribeToTask", {"id": task_id})
    finally:
        await b.stop()
    log = served.log.read_text()
    assert "draining" in log and "grace ran out" not in log
    last_seen = int(ids[-1].rpartition(":")[2])
    later = [(seq, event) for seq, event in await _logged(database, task_id) if seq > last_seen]
    assert len(later) >= 1  # at least the run's final status
    assert resumed == [event for _, event in later]  # every later event A logged, once
    assert on_b.event_ids == [f"{task_id}:{seq}" for seq, _ in later]
    chunks = chunk_texts(seen + resumed)
    assert chunks == [f"chunk-{n}" for n in range(len(chunks))]
    # A's drain stopped the run where it stood (it outlasts the blocking send): B
    # reports it failed "shut down", not the lost-run message of a vanished runner.
    final = resumed[-1]["statusUpdate"]["status"]
    assert final["state"] == FAILED
    assert final["message"]["parts"][0]["text"] == SHUTDOWN
    assert RUN_LOST not in str(resumed)


def _held(context_id: str) -> dict[str, Any]:
    request = send("hold:3")
    request["message"]["contextId"] = context_id
    return request
