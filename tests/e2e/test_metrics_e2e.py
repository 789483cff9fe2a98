"""Issue 28's scripted mix, end to end: one ``serve --llm --metrics`` gateway in-process,
calls on all three bindings (sends, a stream, failed calls, a cancel, a push delivery,
an assistant turn with a tool call against the scripted model, then a watch of one of
its tasks, as ``telegram --a2a --metrics`` runs them), then ``/metrics`` parsed with
prometheus-client's own parser: each counter and histogram with its labels and counts,
every label value from its fixed set, none a task id or a key, and the scrape refused
to an anonymous caller from elsewhere."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from aiohttp import web
from aiohttp.typedefs import Handler

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.agent.metering import PROVIDER_ERRORS, TOOL_OUTCOMES, TURN_OUTCOMES
from a2a_gateway.client.watches import WatchRegistry
from a2a_gateway.protocol.watch_metering import DELIVERY_OUTCOMES, WATCH_MODES, WATCH_OUTCOMES
from a2a_gateway.serve import Gateway
from a2a_gateway.server.metrics import BINDINGS as BINDING_LABELS
from a2a_gateway.server.metrics import (
    METHODS,
    OUTCOMES,
    PUSH_OUTCOMES,
    STORE_OPERATIONS,
    TASK_STATES,
    Metrics,
)

from ..agent.fake_llm import Calls, FakeLLM, Say, Stall
from ..agent.llm_support import llm
from ..client.delegation_support import Inbox, ManualClock, eventually, write_agents
from ..server.test_metrics import FAR_AWAY, Samples, parse, value
from .conftest import KEY_ALICE, Driver
from .outbound_support import settle, webhook_receiver
from .test_assistant_e2e import COMPLETED, start_gateway
from .test_scenarios import expect_error, send

__all__ = ["llm"]  # the scripted provider fixture
BOUND = 10.0  # seconds: an upper bound on waits, never asserted
#: A request carrying this header is seen as coming from FAR_AWAY (the middleware).
FAR = "X-Test-From-Far-Away"
#: Each label's allowed values (bounded cardinality).
ALLOWED: dict[str, frozenset[str]] = {
    "method": METHODS,
    "binding": frozenset(BINDING_LABELS),
    "outcome": OUTCOMES.union(TURN_OUTCOMES, TOOL_OUTCOMES, PUSH_OUTCOMES)
    | frozenset(WATCH_OUTCOMES + DELIVERY_OUTCOMES),
    "mode": frozenset(WATCH_MODES),
    "state": frozenset(TASK_STATES.values()),
    "tool": frozenset({"read_file", "none", "OTHER"}),
    "direction": frozenset({"in", "out"}),
    "kind": frozenset(PROVIDER_ERRORS),
    "store": frozenset({"files"}),
    "operation": frozenset(STORE_OPERATIONS),
    "le": frozenset(),  # bucket bounds: numbers, checked apart
}


def far_away_on_header(app: web.Application) -> None:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if FAR in request.headers:
            request = request.clone(remote=FAR_AWAY)
        return await handler(request)

    app.middlewares.append(middleware)


async def scrape(http: aiohttp.ClientSession, base: str, **headers: str) -> tuple[int, str]:
    async with asyncio.timeout(BOUND), http.get(f"{base}/metrics", headers=headers) as r:
        return r.status, await r.text()


def assert_bounded(samples: Samples, task_ids: list[str]) -> None:
    for name, labels in samples:
        if name.startswith("process_"):
            continue
        for label, label_value in labels:
            assert not any(task_id in label_value for task_id in task_ids), (name, label)
            if label == "le":
                float(label_value)  # a bucket bound, a number ("+Inf" too)
            else:
                assert label_value in ALLOWED[label], (name, label, label_value)


async def test_scripted_mix_on_three_bindings_shows_in_metrics(
    tmp_path: Path, llm: FakeLLM
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("milk")
    llm.script(
        Stall(first="thinking", every=0.05),  # the cancelled turn
        Calls([("read_file", {"path": "notes.txt"})]),  # JSON-RPC: a turn with a tool call
        Say("it says milk"),
        Say(chunks=["str", "eam"]),  # HTTP+JSON: a stream
        Say("hi"),  # gRPC: a send
    )
    async with webhook_receiver() as webhook:
        gateway: Gateway = await start_gateway(
            workspace,
            llm,
            routes=far_away_on_header,
            metrics=True,
            allow_private_urls=True,
            allow_anonymous=True,
        )
        try:
            base = f"http://127.0.0.1:{gateway.http_port}"
            async with (
                aiohttp.ClientSession() as http,
                grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
            ):
                jsonrpc, rest, grpc_ = (
                    Driver(binding, http, base, channel) for binding in ("jsonrpc", "rest", "grpc")
                )
                task_ids = await scripted_mix(gateway, jsonrpc, rest, grpc_, webhook, llm)
                status, text = await scrape(http, base)
                assert status == 200
                # A watch (as telegram --a2a --metrics runs them) of a finished task.
                await watch_a_task(gateway, tmp_path / "owner", task_ids[-1])
                watched = parse((await scrape(http, base))[1])
                # Away from loopback: an anonymous caller is refused, a caller's key is not.
                assert (await scrape(http, base, **{FAR: "1"}))[0] == 403
                keyed = await scrape(http, base, **{FAR: "1", "X-API-Key": KEY_ALICE})
                assert keyed[0] == 200
        finally:
            await gateway.stop()
    samples = parse(text)
    expected_calls = {
        ("SendMessage", "JSONRPC", "OK"): 1,
        ("GetTask", "JSONRPC", "TASK_NOT_FOUND"): 1,
        ("SendStreamingMessage", "HTTP+JSON", "OK"): 1,
        ("GetTask", "HTTP+JSON", "TASK_NOT_FOUND"): 1,
        ("SendMessage", "GRPC", "OK"): 2,  # the cancelled task's, and a reply
        ("CancelTask", "GRPC", "OK"): 1,
        ("GetTask", "GRPC", "TASK_NOT_FOUND"): 1,
    }
    assert calls(samples) == expected_calls
    timed: dict[tuple[str, str], float] = {}
    for (method, binding, _), n in expected_calls.items():
        timed[method, binding] = timed.get((method, binding), 0) + n
    assert {
        (labels["method"], labels["binding"]): v
        for labels, v in series(samples, "a2a_request_duration_seconds_count")
    } == timed
    for binding in BINDING_LABELS:
        assert value(samples, "a2a_open_streams", binding=binding) == 0
    assert value(samples, "a2a_runs_in_flight") == 0
    assert value(samples, "a2a_assistant_turns_total", outcome="finished") == 3
    assert value(samples, "a2a_assistant_turns_total", outcome="stopped") == 1
    tool_ok = {"tool": "read_file", "outcome": "ok"}
    assert value(samples, "a2a_assistant_tool_calls_total", **tool_ok) == 1
    # Four model calls answered; the one a cancel cut short is not timed (runtime.py).
    assert value(samples, "a2a_assistant_model_call_seconds_count") == 4
    assert value(samples, "a2a_push_notifications_total", outcome="delivered") == 2
    assert value(samples, "a2a_push_attempts_count") == 2
    assert value(samples, "a2a_tasks", state=COMPLETED) == 3
    assert value(samples, "a2a_tasks", state="TASK_STATE_CANCELED") == 1
    assert value(samples, "a2a_tasks", state="TASK_STATE_WORKING") == 0
    # The task store's operations, timed (exact counts: tests/server/test_metrics.py).
    saves = value(samples, "a2a_store_operation_seconds_count", store="files", operation="save")
    assert saves >= 4  # every task was saved at least once
    # Its index's first build may still be under way: the series is there, counted or not.
    assert ("a2a_store_index_rebuilds_total", frozenset({("store", "files")})) in samples
    assert_bounded(samples, task_ids)
    assert KEY_ALICE not in text
    assert value(watched, "a2a_watches_total", mode="poll", outcome="settled") == 1
    assert value(watched, "a2a_watch_deliveries_total", outcome="delivered") == 1
    assert value(watched, "a2a_watches_pending", mode="poll") == 0
    # The watch's client: the extended card (a key is sent), then its GetTask.
    more = Counter(calls(watched))
    more.subtract(calls(samples))
    assert +more == {
        ("GetExtendedAgentCard", "JSONRPC", "OK"): 1,
        ("GetTask", "JSONRPC", "OK"): 1,
    }
    assert_bounded(watched, task_ids)


async def watch_a_task(gateway: Gateway, owner: Path, task_id: str) -> None:
    """Watch ``task_id`` on ``gateway`` from ``owner``'s conversation (poll mode, on the
    injectable clock) until its result is delivered."""
    assert isinstance(gateway.metrics, Metrics)
    clock, inbox = ManualClock(), Inbox()
    registry = WatchRegistry(clock=clock, allow_private_urls=True, meter=gateway.metrics.watches)
    gateway.metrics.watches.count_pending(registry)
    url = f"http://127.0.0.1:{gateway.http_port}"
    write_agents(owner, [{"name": "self", "url": url, "key": KEY_ALICE, "allow_private": True}])
    registry.register_target(owner, "owner", inbox)
    try:
        await registry.watch(owner, "owner", "self", task_id, "c", card=pb.AgentCard())
        await eventually(lambda: clock.sleeping > 1 and 15.0 in clock.slept)
        clock.advance(15)  # the first poll
        await eventually(lambda: bool(inbox.texts))
        await registry.quiesce(owner, bound=BOUND)
    finally:
        await registry.aclose()


def calls(samples: Samples) -> dict[tuple[str, str, str], float]:
    return {
        (labels["method"], labels["binding"], labels["outcome"]): v
        for labels, v in series(samples, "a2a_requests_total")
    }


def series(samples: Samples, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(labels), v) for (n, labels), v in samples.items() if n == name]


async def scripted_mix(
    gateway: Gateway, jsonrpc: Driver, rest: Driver, grpc_: Driver, webhook: Any, llm: FakeLLM
) -> list[str]:
    """The calls; the ids of the tasks they made."""
    ids: list[str] = []
    # gRPC: a send left running, cancelled while the model streams.
    running = send("think hard", configuration={"returnImmediately": True})
    ids.append((await grpc_.call("SendMessage", running))["task"]["id"])
    async with asyncio.timeout(BOUND):
        await llm.received.wait()  # the turn has reached the provider (its first request)
    canceled = await grpc_.call("CancelTask", {"id": ids[-1]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    # JSON-RPC: a turn with a tool call, its task's status pushed to a webhook.
    push = {"taskPushNotificationConfig": {"url": webhook.url("/hook")}}
    done = await jsonrpc.call("SendMessage", send("read it", configuration=push))
    assert done["task"]["status"]["state"] == COMPLETED
    ids.append(done["task"]["id"])
    # HTTP+JSON: a stream.
    events = await rest.stream("SendStreamingMessage", send("stream it"))
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED
    ids.append(events[-1]["statusUpdate"]["taskId"])
    replied = await grpc_.call("SendMessage", send("hello"))
    ids.append(replied["task"]["id"])
    # A failed call on each binding.
    for driver in (jsonrpc, rest, grpc_):
        await expect_error("TASK_NOT_FOUND", driver.call("GetTask", {"id": "no-such-task"}))
    await webhook.wait_for("/hook", 2)  # WORKING, COMPLETED
    await settle(gateway)
    assert gateway.engine is not None
    async with asyncio.timeout(BOUND):
        while gateway.engine.live_task_ids():  # noqa: ASYNC110 - the cancelled run ends
            await asyncio.sleep(0.01)
    return ids
