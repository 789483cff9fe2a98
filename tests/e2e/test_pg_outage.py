"""A PostgreSQL outage under load: the database is stopped by its pid (a fast shutdown)
while blocking sends keep coming, then started again. Meanwhile every answer is the
protocol's UNAVAILABLE with a Retry-After (on each binding; never 500 INTERNAL), an
open stream ends with UNAVAILABLE, ``/readyz`` says not ready, and the log holds one
WARNING for the outage and one INFO for its end, no traceback; once the database is
back the gateway serves again and is ready.

The cluster is the test's own (:class:`~a2a_gateway.server.pg_local.LocalPostgres`),
not the suite's shared one: it is stopped and started here.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import grpc
import pytest

from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.store_outage import RETRY_AFTER_S
from a2a_gateway.server.task_states import TERMINAL
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.secrets import use_secret

from .conftest import BINDINGS, KEY_ALICE, Driver, WireError, running_gateway

LOAD_WORKERS = 4
CHUNKS = 80  # 50 ms apart: the run lasts about as long as the outage
BACK_WITHIN_S = 15.0  # generous: the gateway serves with its first request after the return


def _send(text: str, **configuration: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "message": {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    }
    if configuration:
        request["configuration"] = configuration
    return request


async def _ready(http: aiohttp.ClientSession, base: str) -> bool:
    async with http.get(f"{base}/readyz") as response:
        return response.status == 200


async def _until(check: Callable[[], Awaitable[bool]], want: bool, within_s: float) -> bool:
    """Whether ``check()`` answers ``want`` within ``within_s`` (asked every 0.1 s)."""
    deadline = time.monotonic() + within_s
    while True:
        if await check() == want:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)


async def test_a_database_outage_is_answered_unavailable_and_served_again_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pg = LocalPostgres()  # its folder in the system temp folder (the server user reads it)
    await asyncio.to_thread(pg.start)
    use_secret(pg.password)
    try:
        async with (
            running_gateway(
                tmp_path, store="postgres", database_url=pg.url, database_pool_size=4
            ) as gateway,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
            grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
        ):
            base = f"http://127.0.0.1:{gateway.http_port}"
            drivers = {b: Driver(b, http, base, channel) for b in BINDINGS}
            await _outage_under_load(pg, http, base, drivers)
    finally:
        await asyncio.to_thread(pg.stop)
    outage_lines = [r for r in caplog.records if r.name.endswith("store_outage")]
    assert [(r.levelno, "unavailable" in r.getMessage()) for r in outage_lines] == [
        (logging.WARNING, True),
        (logging.INFO, False),  # "... is back after N s"
    ]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert pg.password not in caplog.text


async def _outage_under_load(
    pg: LocalPostgres, http: aiohttp.ClientSession, base: str, drivers: dict[str, Driver]
) -> None:
    rest = drivers["rest"]
    first = await rest.call("SendMessage", _send("hi"))
    assert first["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert await _ready(http, base)
    held = (await rest.call("SendMessage", _send("hold:60", returnImmediately=True)))["task"]
    # A run that goes on across the outage: its stream events wait, and are logged
    # (for followers on other replicas) once the database is back.
    chunked = await rest.call("SendMessage", _send(f"chunks:{CHUNKS}:50", returnImmediately=True))
    stream = rest.open_stream("SubscribeToTask", {"id": held["id"]})
    assert (await anext(stream))["task"]["id"] == held["id"]

    answers: list[tuple[int, str | None, str]] = []  # (status, Retry-After, state/reason)
    stop_load = asyncio.Event()

    async def load() -> None:
        headers = {"X-API-Key": KEY_ALICE, "A2A-Version": "1.0"}
        while not stop_load.is_set():
            body = _send("hi")
            async with http.post(f"{base}/a2a/v1/message:send", json=body, headers=headers) as r:
                payload = await r.json(content_type=None)
            if r.status == 200:
                what = payload["task"]["status"]["state"]
            else:
                what = next(d["reason"] for d in payload["error"]["details"] if "reason" in d)
            answers.append((r.status, r.headers.get("Retry-After"), what))

    workers = [asyncio.create_task(load()) for _ in range(LOAD_WORKERS)]
    try:
        await asyncio.sleep(0.3)
        await asyncio.to_thread(pg.stop_server)
        answered_before = len(answers)
        # The open stream ends with UNAVAILABLE (its client subscribes again later).
        with pytest.raises(WireError) as ended:
            async with asyncio.timeout(10):
                async for _ in stream:
                    pass
        assert ended.value.reason == "UNAVAILABLE"
        # Each binding answers UNAVAILABLE (503 on HTTP+JSON, UNAVAILABLE on gRPC).
        codes = {}
        for binding, driver in drivers.items():
            with pytest.raises(WireError) as refused:
                await driver.call("SendMessage", _send("hi"))
            assert refused.value.reason == "UNAVAILABLE", binding
            codes[binding] = refused.value.code
        assert codes["rest"] == 503
        assert codes["grpc"] == grpc.StatusCode.UNAVAILABLE
        async with http.post(
            f"{base}/a2a",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "GetTask",
                "params": {"id": first["task"]["id"]},
            },
            headers={"X-API-Key": KEY_ALICE, "A2A-Version": "1.0"},
        ) as response:
            assert response.headers["Retry-After"] == str(RETRY_AFTER_S)
            assert (await response.json())["error"]["code"] == -32603
        assert await _until(lambda: _ready(http, base), False, 10.0), "/readyz stayed ready"
        await asyncio.sleep(2.0)  # more of the load meets it; events wait longer than retries
        during = answers[answered_before:]
        await asyncio.to_thread(pg.start_server)
        served = await _until(lambda: _served(drivers["jsonrpc"]), True, BACK_WITHIN_S)
        assert served, "not serving after the database came back"
        assert await _until(lambda: _ready(http, base), True, 10.0), "/readyz not ready again"
        logged = await _logged_events(pg.url, chunked["task"]["id"])
    finally:
        stop_load.set()
        await asyncio.gather(*workers, return_exceptions=True)
    assert any(status == 503 for status, _, _ in during), "the load never met the outage"
    failures = [a for a in answers if a[0] != 200]
    assert all(a == (503, str(RETRY_AFTER_S), "UNAVAILABLE") for a in failures), failures
    assert answers[-1] == (200, None, "TASK_STATE_COMPLETED")
    # Every event of the run across the outage is in the log, numbered without a gap.
    assert [seq for seq, _ in logged] == list(range(1, len(logged) + 1))
    chunks = [
        e.artifact_update.artifact.parts[0].text
        for _, e in logged
        if e.artifact_update.artifact.parts
    ]
    assert chunks == [f"chunk-{n}" for n in range(CHUNKS)]


async def _logged_events(url: str, task_id: str) -> list[tuple[int, pb.StreamResponse]]:
    """The task's logged events, once its last (a final status) is logged (bounded)."""
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + BACK_WITHIN_S
        while True:
            rows = await conn.fetch(
                "SELECT seq, event FROM a2a_events WHERE task_id = $1 ORDER BY seq", task_id
            )
            events = [(int(r["seq"]), pb.StreamResponse.FromString(r["event"])) for r in rows]
            last = events[-1][1] if events else None
            if last is not None and last.status_update.status.state in TERMINAL:
                return events
            if time.monotonic() > deadline:
                return events
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


async def _served(driver: Driver) -> bool:
    try:
        await driver.call("SendMessage", _send("hi"))
    except WireError:
        return False
    return True
