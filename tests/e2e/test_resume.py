"""Resumable streams on every binding: a stream cut mid-way resumes from the id of the
last event it received (SSE ``Last-Event-ID``, gRPC ``a2a-last-event-id``) with every
later event exactly once; a resume point no longer kept gets the snapshot, flagged."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from a2a_gateway.protocol.resume import (
    EVENT_ID_KEY,
    GRPC_RESUME_KEY,
    LAST_EVENT_ID_HEADER,
    RESUME_EXPIRED,
    RESUME_EXTENSION,
)
from a2a_gateway.serve import Gateway

from .conftest import KEY_ALICE, Driver, WireError, running_gateway
from .test_cli_resume import CUT_AFTER_S, CuttingProxy
from .test_postgres_store import database, two_gateways  # noqa: F401 (fixtures)
from .test_proxy import make_proxy  # noqa: F401 (a fixture)
from .test_scenarios import COMPLETED, send

PAYLOADS = ("task", "message", "statusUpdate", "artifactUpdate")


def last_id(driver: Driver, event: dict[str, Any]) -> str:
    """The id of ``event``, the stream's latest: SSE's ``id:``, else (gRPC) the one in
    its payload's metadata."""
    if driver.binding != "grpc":
        found = driver.event_ids[-1]
        assert found is not None
        return found
    kind = next(k for k in PAYLOADS if k in event)
    found_id: str = event[kind]["metadata"][EVENT_ID_KEY]
    return found_id


def resume_from(driver: Driver, event_id: str) -> None:
    key = GRPC_RESUME_KEY if driver.binding == "grpc" else LAST_EVENT_ID_HEADER
    driver.extra[key] = event_id


def chunk_texts(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["artifactUpdate"]["artifact"]["parts"][0]["text"] for e in events if "artifactUpdate" in e
    ]


async def cut_after(driver: Driver, text: str, upto: str) -> tuple[str, str]:
    """Stream ``text`` and drop the connection once ``upto`` arrived: (task id, the
    last event id received)."""
    driver.extra = {"A2A-Extensions": RESUME_EXTENSION}
    stream = driver.open_stream("SendStreamingMessage", send(text))
    task_id = event_id = ""
    async for event in stream:
        event_id = last_id(driver, event)
        if "task" in event:
            task_id = event["task"]["id"]
        if upto in chunk_texts([event]):
            break
    await stream.aclose()  # type: ignore[attr-defined]  # an async generator
    assert task_id and event_id.startswith(task_id + ":")
    return task_id, event_id


async def test_a_stream_cut_after_chunk_17_resumes_with_every_later_event_once(
    driver: Driver,
) -> None:
    task_id, cut_at = await cut_after(driver, "chunks:100:50", "chunk-17")
    # Some chunks go by while the client is away: the resumed stream reads them from
    # the log, then follows the run live.
    await until_task(driver, task_id, lambda task: len(chunk_parts(task)) >= 30)
    resume_from(driver, cut_at)
    driver.event_ids.clear()
    ids: list[str] = []
    events: list[dict[str, Any]] = []
    async for event in driver.open_stream("SubscribeToTask", {"id": task_id}):
        events.append(event)
        ids.append(last_id(driver, event))
    assert chunk_texts(events) == [f"chunk-{i}" for i in range(18, 100)]
    assert not any("task" in e for e in events)  # no snapshot: nothing was missed
    assert [e["statusUpdate"]["status"]["state"] for e in events if "statusUpdate" in e] == [
        COMPLETED
    ]
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED
    first = int(cut_at.rpartition(":")[2]) + 1
    assert ids == [f"{task_id}:{n}" for n in range(first, first + len(events))]


def chunk_parts(task: dict[str, Any]) -> list[str]:
    """The faux chunks a task holds (stored as one text part: whole answers)."""
    text = "".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])
    return ["chunk-" + rest for rest in text.split("chunk-")[1:]]


def completed(task: dict[str, Any]) -> bool:
    return bool(task["status"]["state"] == COMPLETED)


async def until_task(driver: Driver, task_id: str, done: Callable[[dict[str, Any]], bool]) -> None:
    """Poll GetTask until ``done`` holds for the task (bounded)."""
    async with asyncio.timeout(20):
        while True:
            if done(await driver.call("GetTask", {"id": task_id})):
                return
            await asyncio.sleep(0.02)


async def test_a_resume_after_the_task_ended_replays_the_rest_and_ends(driver: Driver) -> None:
    task_id, cut_at = await cut_after(driver, "chunks:30", "chunk-17")
    await until_task(driver, task_id, completed)
    resume_from(driver, cut_at)
    events = await driver.stream("SubscribeToTask", {"id": task_id})
    assert chunk_texts(events) == [f"chunk-{i}" for i in range(18, 30)]
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED


async def test_a_resume_point_of_another_task_is_invalid_params(driver: Driver) -> None:
    task_id, _ = await cut_after(driver, "chunks:3", "chunk-0")
    resume_from(driver, "another-task:2")
    try:
        await driver.stream("SubscribeToTask", {"id": task_id})
    except WireError as exc:
        assert exc.reason == "INVALID_PARAMS"
        assert LAST_EVENT_ID_HEADER in exc.message
    else:
        raise AssertionError("a resume point of another task was accepted")


async def test_without_a_resume_point_a_stream_is_as_before_plus_ids(driver: Driver) -> None:
    events = await driver.stream("SendStreamingMessage", send("chunks:3"))
    assert "task" in events[0] and chunk_texts(events) == ["chunk-0", "chunk-1", "chunk-2"]
    if driver.binding != "grpc":  # SSE: every event has its id; the snapshot's is 0
        task_id = events[0]["task"]["id"]
        assert driver.event_ids == [f"{task_id}:{n}" for n in range(len(events))]
    else:  # gRPC: no id in the events of a call that did not ask for them
        assert all("metadata" not in e[next(k for k in PAYLOADS if k in e)] for e in events)


async def test_an_expired_resume_point_gets_the_snapshot_flagged(tmp_path: Path) -> None:
    async with (
        running_gateway(tmp_path, store="memory", event_log_kib=1) as gateway,
        aiohttp.ClientSession() as http,
    ):
        driver = Driver("jsonrpc", http, f"http://127.0.0.1:{gateway.http_port}", None)  # type: ignore[arg-type]
        task_id, _ = await cut_after(driver, "chunks:60", "chunk-0")
        await until_task(driver, task_id, completed)
        resume_from(driver, f"{task_id}:1")  # long gone from a 1 KiB log
        events = await driver.stream("SubscribeToTask", {"id": task_id})
        assert len(events) == 1
        snapshot = events[0]["task"]
        assert snapshot["metadata"][RESUME_EXPIRED] is True
        assert snapshot["status"]["state"] == COMPLETED
        assert len(chunk_parts(snapshot)) == 60


async def test_ids_and_resume_points_pass_through_proxy_mode(
    gateway: Gateway,
    make_proxy: Callable[..., Any],  # noqa: F811 (the fixture)
) -> None:
    """A proxy in front of this gateway relays the upstream's event ids and forwards a
    resume point to it: a stream cut at the proxy resumes there."""
    proxy = await make_proxy(f"http://127.0.0.1:{gateway.http_port}", KEY_ALICE)
    async with aiohttp.ClientSession() as http:
        driver = Driver("jsonrpc", http, f"http://127.0.0.1:{proxy.http_port}", None, key="")  # type: ignore[arg-type]
        task_id, cut_at = await cut_after(driver, "chunks:40:20", "chunk-17")
        resume_from(driver, cut_at)
        events = await driver.stream("SubscribeToTask", {"id": task_id})
        assert chunk_texts(events) == [f"chunk-{i}" for i in range(18, 40)]
        assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED


async def test_proxy_mode_resumes_its_upstream_stream_when_it_drops(
    gateway: Gateway,
    make_proxy: Callable[..., Any],  # noqa: F811 (the fixture)
) -> None:
    """The connection between a proxy and its upstream is cut every 2 s: the proxy's
    caller still gets every chunk once, its own stream unbroken."""
    cutting = CuttingProxy(gateway.http_port, CUT_AFTER_S)
    port = await cutting.start()
    try:
        proxy = await make_proxy(f"http://127.0.0.1:{port}", KEY_ALICE)
        async with aiohttp.ClientSession() as http:
            driver = Driver("jsonrpc", http, f"http://127.0.0.1:{proxy.http_port}", None, key="")  # type: ignore[arg-type]
            events = await driver.stream("SendStreamingMessage", send("chunks:100:40"))
        assert chunk_texts(events) == [f"chunk-{i}" for i in range(100)]
        assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED
        assert cutting.cuts >= 1
    finally:
        await cutting.aclose()


@pytest.mark.parametrize("binding", ["jsonrpc", "rest", "grpc"])
async def test_a_stream_cut_on_one_replica_resumes_on_the_other(
    two_gateways: list[Driver],  # noqa: F811 (the fixture)
    binding: str,
) -> None:
    """Two gateways on one PostgreSQL database: a stream cut on A resumes on B."""
    a, b = two_gateways
    task_id, cut_at = await cut_after(a, "chunks:60:30", "chunk-17")
    on_b = Driver(binding, b.http, b.base, b.channel)
    await until_task(on_b, task_id, lambda task: len(chunk_parts(task)) >= 25)
    resume_from(on_b, cut_at)
    events = await on_b.stream("SubscribeToTask", {"id": task_id})
    assert chunk_texts(events) == [f"chunk-{i}" for i in range(18, 60)]
    assert not any("task" in e for e in events)
    assert [e["statusUpdate"]["status"]["state"] for e in events if "statusUpdate" in e] == [
        COMPLETED
    ]
