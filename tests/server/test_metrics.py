"""Metrics and health: ``/metrics`` parsed with prometheus-client's own parser after
calls on all three bindings, its guard, ``/healthz``/``/readyz``, the gRPC health
service following readiness, and the stores' readiness checks.

All servers are in-process (aiohttp test servers, grpc.aio on 127.0.0.1): no
subprocess is started.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from aiohttp import web
from aiohttp.typedefs import Handler
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.server.auth import WorkspaceCallers
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.file_store import WorkspaceTaskStore, WorkspaceTaskStores
from a2a_gateway.server.grpc_server import build_grpc_server
from a2a_gateway.server.health import Readiness
from a2a_gateway.server.memory_store import MemoryTaskStore
from a2a_gateway.server.metrics import (
    BINDINGS,
    METHODS,
    OUTCOMES,
    TASK_STATES,
    Metrics,
)
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import PostgresTaskStore
from a2a_gateway.server.secret_box import SecretBox
from a2a_gateway.server.task_store import TaskRecord, TaskStore
from tests.support.echo import EchoService
from tests.support.grpc_serving import grpc_serving
from tests.support.postgres import (
    fresh_database,
    postgres,  # noqa: F401 - the session's PostgreSQL
)

from .conftest import KEY, Http, Starter, text_message

BOUND = 10.0  # seconds: an upper bound on anything that could hang, never asserted
V1 = {"A2A-Version": "1.0"}
GRPC_V1 = (("a2a-version", "1.0"),)
#: A client address that is not loopback (TEST-NET-3), put on requests by a middleware.
FAR_AWAY = "203.0.113.7"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of the exposition: (name, labels) -> value."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(http: Http, **headers: str) -> tuple[int, str]:
    async with asyncio.timeout(BOUND):
        response = await http.client.get("/metrics", headers=headers)
        async with response:
            return response.status, await response.text()


async def jsonrpc_stream(http: Http, params: dict[str, Any]) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    async with asyncio.timeout(BOUND):
        response = await http.client.post("/a2a", json=body, headers=V1)
        async with response:
            assert response.status == 200
            return await response.text()


@pytest.fixture
async def grpc_channel(metrics: Metrics) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc_serving(EchoService(stateless=True), build={"meter": metrics.grpc}) as served:
        yield served.channel


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(process=False)


async def test_calls_on_all_three_bindings_are_counted_with_bounded_labels(
    start_http: Starter, metrics: Metrics, grpc_channel: grpc.aio.Channel
) -> None:
    http = await start_http(metrics=metrics)
    grpc_stub = a2a_pb2_grpc.A2AServiceStub(grpc_channel)
    before = parse((await scrape(http))[1])
    assert (
        value(before, "a2a_requests_total", method="SendMessage", binding="JSONRPC", outcome="OK")
        == 0
    )

    # JSON-RPC: a send, a failed read, an unknown method, a 0.3 method, a stream.
    status, body = await http.rpc("SendMessage", text_message("hi"), headers=V1)
    assert status == 200 and body["result"]["task"]["id"] == "task-1"
    status, body = await http.rpc("GetTask", {"id": "task-404"}, headers=V1)
    assert body["error"]["code"] == -32001
    status, body = await http.rpc("tasks/frobnicate-task-1", {})
    assert body["error"]["code"] == -32601
    async with asyncio.timeout(BOUND):  # refused for its Content-Type, its method known
        envelope = b'{"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{}}'
        form = {"Content-Type": "application/x-www-form-urlencoded", **V1}
        async with http.client.post("/a2a", data=envelope, headers=form) as r:
            assert (await r.json())["error"]["code"] == -32600
    legacy = {
        "message": {"messageId": "m-03", "role": "user", "parts": [{"kind": "text", "text": "x"}]}
    }
    status, body = await http.rpc("message/send", legacy)
    assert "result" in body, body
    assert "chunk 1" in await jsonrpc_stream(http, text_message("s", "m-s"))

    # HTTP+JSON: a send, a missing task, an unknown path.
    async with asyncio.timeout(BOUND):
        async with http.client.post(
            "/a2a/v1/message:send", json=text_message("r", "m-r"), headers=V1
        ) as r:
            assert r.status == 200
        async with http.client.get("/a2a/v1/tasks/task-9999", headers=V1) as r:
            assert r.status == 404
        async with http.client.get("/a2a/v1/no/such/route/task-1", headers=V1) as r:
            assert r.status == 404

    # gRPC: a send, a failed read, a stream.
    async with asyncio.timeout(BOUND):
        message = pb.Message(message_id="g-1", role=pb.ROLE_USER, parts=[pb.Part(text="g")])
        await grpc_stub.SendMessage(pb.SendMessageRequest(message=message), metadata=GRPC_V1)
        with pytest.raises(grpc.aio.AioRpcError):
            await grpc_stub.GetTask(
                pb.GetTaskRequest(id="error:TaskNotFoundError"), metadata=GRPC_V1
            )
        stream = grpc_stub.SendStreamingMessage(
            pb.SendMessageRequest(
                message=pb.Message(message_id="g-2", role=pb.ROLE_USER, parts=[pb.Part(text="s")])
            ),
            metadata=GRPC_V1,
        )
        events = [event async for event in stream]
        assert events
        nobody = grpc_channel.unary_unary("/lf.a2a.v1.A2AService/NoSuchMethod-task-1")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await nobody(b"", metadata=GRPC_V1)
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED

    status, text = await scrape(http)
    assert status == 200
    after = parse(text)

    def count(method: str, binding: str, outcome: str) -> float:
        return value(after, "a2a_requests_total", method=method, binding=binding, outcome=outcome)

    def timed(method: str, binding: str) -> float:
        return value(after, "a2a_request_duration_seconds_count", method=method, binding=binding)

    assert count("SendMessage", "JSONRPC", "OK") == 2  # 1.0 and the 0.3 message/send
    assert count("GetTask", "JSONRPC", "TASK_NOT_FOUND") == 1
    assert count("unknown", "JSONRPC", "METHOD_NOT_FOUND") == 1
    assert count("ListTasks", "JSONRPC", "INVALID_REQUEST") == 1
    assert count("SendStreamingMessage", "JSONRPC", "OK") == 1
    assert count("SendMessage", "HTTP+JSON", "OK") == 1
    assert count("GetTask", "HTTP+JSON", "TASK_NOT_FOUND") == 1
    assert count("unknown", "HTTP+JSON", "METHOD_NOT_FOUND") == 1
    assert count("SendMessage", "GRPC", "OK") == 1
    assert count("GetTask", "GRPC", "TASK_NOT_FOUND") == 1
    assert count("SendStreamingMessage", "GRPC", "OK") == 1
    assert count("unknown", "GRPC", "METHOD_NOT_FOUND") == 1
    # Latency: one observation per call, whatever its outcome; a bucket per bound.
    assert timed("SendMessage", "JSONRPC") == 2
    assert timed("GetTask", "GRPC") == 1
    assert timed("SendStreamingMessage", "JSONRPC") == 1
    assert timed("SendStreamingMessage", "GRPC") == 1
    inf = value(
        after,
        "a2a_request_duration_seconds_bucket",
        method="SendMessage",
        binding="GRPC",
        le="+Inf",
    )
    assert inf == 1
    for binding in BINDINGS:  # every stream has ended
        assert value(after, "a2a_open_streams", binding=binding) == 0

    # Bounded cardinality: every label value comes from a fixed set, none is an id.
    looks_like_an_id = re.compile(r"task-|ctx-|^m-|^g-|error:|frobnicate|" + re.escape(KEY))
    for name, labels in after:
        for label, shown in labels:
            assert not looks_like_an_id.search(shown), (name, label, shown)
            if label == "method":
                assert shown in METHODS
            elif label == "binding":
                assert shown in BINDINGS
            elif label == "outcome":
                assert shown in OUTCOMES
            elif label == "direction":  # the assistant's tokens (none counted here)
                assert shown in ("in", "out")
            else:
                assert label == "le", (name, label)


async def test_open_streams_gauge_counts_a_stream_while_it_is_open(
    start_http: Starter, metrics: Metrics
) -> None:
    http = await start_http(metrics=metrics, config=ServerConfig(keepalive_interval_s=0.05))
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
    body["params"] = text_message("h", "m-hang", hang=True)
    async with asyncio.timeout(BOUND):
        response = await http.client.post("/a2a", json=body, headers=V1)
        await response.content.readline()  # the first event's line: the stream is open
        during = parse((await scrape(http))[1])
        assert value(during, "a2a_open_streams", binding="JSONRPC") == 1
        response.close()  # the client leaves
        await http.service.stream_closed.wait()
        for _ in range(100):
            after = parse((await scrape(http))[1])
            if value(after, "a2a_open_streams", binding="JSONRPC") == 0:
                break
            await asyncio.sleep(0.02)
    assert value(after, "a2a_open_streams", binding="JSONRPC") == 0
    outcome = {"method": "SendStreamingMessage", "binding": "JSONRPC", "outcome": "CLIENT_GONE"}
    assert value(after, "a2a_requests_total", **outcome) == 1


def test_a_stray_label_value_is_folded_into_unknown_or_other(metrics: Metrics) -> None:
    meter = metrics.grpc
    meter.done("task-5f1e", "a caller's free text", meter.start())
    samples = parse(metrics.exposition().decode())
    stray = {"method": "unknown", "binding": "GRPC", "outcome": "OTHER"}
    assert value(samples, "a2a_requests_total", **stray) == 1
    assert (
        value(samples, "a2a_request_duration_seconds_count", method="unknown", binding="GRPC") == 1
    )
    # The watches' meter folds strays likewise (a watch id is never a label).
    metrics.watches.ended("w-5f1e", "a caller's free text")
    metrics.watches.delivery("task-5f1e")
    samples = parse(metrics.exposition().decode())
    assert value(samples, "a2a_watches_total", mode="OTHER", outcome="OTHER") == 1
    assert value(samples, "a2a_watch_deliveries_total", outcome="OTHER") == 1


def from_far_away() -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await handler(request.clone(remote=FAR_AWAY))

    return middleware


async def test_metrics_guard_loopback_or_a_caller_key(
    start_http: Starter, metrics: Metrics, keyed_workspace: Path
) -> None:
    local = await start_http(metrics=metrics)
    assert (await scrape(local))[0] == 200
    # Anonymous access allowed (AllowAnonymous), but not from far away: 403.
    anonymous = await start_http(metrics=metrics, middlewares=[from_far_away()])
    status, text = await scrape(anonymous)
    assert status == 403 and "a2a_requests" not in text
    # Keys required: none or a wrong one is 401; a caller's key is let in.
    keyed = await start_http(
        metrics=metrics,
        config=ServerConfig(workspaces=[keyed_workspace]),
        authenticator=WorkspaceCallers([keyed_workspace]),
        middlewares=[from_far_away()],
    )
    assert (await scrape(keyed))[0] == 401
    assert (await scrape(keyed, **{"X-API-Key": "k-wrong-000000"}))[0] == 401
    status, text = await scrape(keyed, **{"X-API-Key": KEY})
    assert status == 200 and "a2a_requests_total" in text


async def test_metrics_off_serves_no_metrics_route(start_http: Starter) -> None:
    http = await start_http()  # NULL_METRICS
    status, _ = await scrape(http)
    assert status == 404  # the HTTP+JSON catch-all: no such route


async def test_healthz_and_readyz(start_http: Starter) -> None:
    problem: list[str | None] = [None]

    async def store() -> str | None:
        return problem[0]

    http = await start_http(readiness=Readiness({"store": store}, cache_s=0))
    async with asyncio.timeout(BOUND):
        async with http.client.get("/healthz") as r:
            assert r.status == 200 and await r.json() == {"status": "ok"}
        async with http.client.get("/readyz") as r:
            assert r.status == 200 and await r.json() == {"status": "ready"}
        problem[0] = "the database does not answer"
        async with http.client.get("/readyz") as r:
            assert r.status == 503
            assert await r.json() == {
                "status": "not ready",
                "problems": {"store": "the database does not answer"},
            }
        async with http.client.get("/healthz") as r:  # alive all the same
            assert r.status == 200


async def test_grpc_health_follows_readiness() -> None:
    from a2a_gateway.server.auth import AllowAnonymous

    problem: list[str | None] = [None]

    async def store() -> str | None:
        return problem[0]

    readiness = Readiness({"store": store}, cache_s=0)
    server, port = await build_grpc_server(
        EchoService(stateless=True),
        ServerConfig(host="127.0.0.1", grpc_port=0),
        AllowAnonymous(),
        readiness=readiness,
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service="")
            async with asyncio.timeout(BOUND):
                assert (await readiness.problems()) == {}
                found = await health.Check(request)
                assert found.status == health_pb2.HealthCheckResponse.SERVING
                problem[0] = "down"
                assert (await readiness.problems()) == {"store": "down"}
                found = await health.Check(request)
                assert found.status == health_pb2.HealthCheckResponse.NOT_SERVING
                problem[0] = None
                await readiness.problems()
                found = await health.Check(request)
                assert found.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(None)


async def test_store_readiness(tmp_path: Path) -> None:
    assert await MemoryTaskStore().readiness() is None
    files = WorkspaceTaskStore(tmp_path)
    try:
        assert await files.readiness() is None
    finally:
        await files.aclose()
    # Nothing listens on port 1: not ready, with a fixed reason (never the URL).
    url = "postgresql://gw:s3cret-pw@127.0.0.1:1/gw"
    pg = PostgresTaskStore(url, box=SecretBox(tmp_path), acquire_timeout_s=0.5)
    try:
        why = await pg.readiness()
    finally:
        await pg.aclose()
    assert why == "the database does not answer"


async def test_engine_gauges_read_at_scrape_time(metrics: Metrics) -> None:
    engine = TaskEngine(FauxAgent(), MemoryTaskStore())
    metrics.watch_engine(engine)
    try:
        message = pb.Message(
            message_id="m-hold", role=pb.ROLE_USER, parts=[pb.Part(text="hold:30")]
        )
        request = pb.SendMessageRequest(
            message=message, configuration=pb.SendMessageConfiguration(return_immediately=True)
        )
        async with asyncio.timeout(BOUND):
            answer = await engine.send_message(request, CallContext())
        during = parse(metrics.exposition().decode())
        assert value(during, "a2a_runs_in_flight") == 1
        assert value(during, "a2a_context_claims") == 1
        async with asyncio.timeout(BOUND):
            await engine.cancel_task(pb.CancelTaskRequest(id=answer.task.id), CallContext())
            while engine.live_task_ids():  # noqa: ASYNC110 - the run ends after the answer
                await asyncio.sleep(0.01)
        after = parse(metrics.exposition().decode())
        assert value(after, "a2a_runs_in_flight") == 0
    finally:
        await engine.aclose()


async def test_gateway_serves_metrics_on_its_metrics_port(tmp_path: Path) -> None:
    """``serve`` wiring, in-process: the engine's gauges and the bindings' counts on
    ``--metrics-port``; the HTTP port keeps the health endpoints, not ``/metrics``."""
    import aiohttp

    from a2a_gateway.serve import Gateway
    from a2a_gateway.settings import resolve

    (tmp_path / "ws").mkdir()
    flags = {
        "workspace": [str(tmp_path / "ws")],
        "allow_anonymous": True,
        "port": 0,
        "grpc_port": -1,
        "metrics_port": 0,
        "metrics": True,
        "faux": True,
    }
    gateway = Gateway(resolve(flags, environ={}))
    await gateway.start()
    try:
        http = f"http://127.0.0.1:{gateway.http_port}"
        async with aiohttp.ClientSession() as session, asyncio.timeout(BOUND):
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}
            body["params"] = text_message("hello", "m-gw")
            async with session.post(f"{http}/a2a", json=body, headers=V1) as r:
                assert "result" in await r.json()
            async with session.get(f"{http}/metrics") as r:
                assert r.status == 404
            async with session.get(f"{http}/readyz") as r:
                assert r.status == 200
            async with session.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics") as r:
                assert r.status == 200
                samples = parse(await r.text())
    finally:
        await gateway.stop()
    sent = {"method": "SendMessage", "binding": "JSONRPC", "outcome": "OK"}
    assert value(samples, "a2a_requests_total", **sent) == 1
    assert ("a2a_runs_in_flight", frozenset()) in samples
    assert any(name == "process_cpu_seconds_total" for name, _ in samples)


async def test_grpc_streams_open_ended_by_the_client_and_failed_midway(metrics: Metrics) -> None:
    from a2a_gateway.server.auth import AllowAnonymous

    service = EchoService(stateless=True)
    config = ServerConfig(host="127.0.0.1", grpc_port=0)
    server, port = await build_grpc_server(service, config, AllowAnonymous(), meter=metrics.grpc)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            async with asyncio.timeout(BOUND):
                call = stub.SubscribeToTask(pb.SubscribeToTaskRequest(id="hang"), metadata=GRPC_V1)
                await call.read()  # the snapshot: the stream is open
                during = parse(metrics.exposition().decode())
                assert value(during, "a2a_open_streams", binding="GRPC") == 1
                call.cancel()
                await service.closed["hang"].wait()
                for _ in range(100):
                    after = parse(metrics.exposition().decode())
                    if value(after, "a2a_open_streams", binding="GRPC") == 0:
                        break
                    await asyncio.sleep(0.02)
                failing = stub.SubscribeToTask(
                    pb.SubscribeToTaskRequest(id="midstream:TaskNotFoundError"), metadata=GRPC_V1
                )
                with pytest.raises(grpc.aio.AioRpcError):
                    async for _ in failing:
                        pass
    finally:
        await server.stop(None)
    samples = parse(metrics.exposition().decode())
    assert value(samples, "a2a_open_streams", binding="GRPC") == 0
    calls = {"method": "SubscribeToTask", "binding": "GRPC"}
    assert value(samples, "a2a_requests_total", outcome="CLIENT_GONE", **calls) == 1
    assert value(samples, "a2a_requests_total", outcome="TASK_NOT_FOUND", **calls) == 1
    assert value(samples, "a2a_request_duration_seconds_count", **calls) == 2  # once each


async def test_postgres_readiness_follows_the_database(
    postgres: LocalPostgres,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """Not ready while the database refuses connections (its sessions ended, new ones
    refused: what a stopped server looks like to the pool), ready again after."""
    url = await fresh_database(postgres)
    name = url.rsplit("/", 1)[1]
    store = PostgresTaskStore(url, box=SecretBox(tmp_path), acquire_timeout_s=1.0)
    admin = await asyncpg.connect(postgres.url)
    try:
        await store.start()
        assert await store.readiness() is None
        await admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
        )
        assert await store.readiness() == "the database does not answer"
        await admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        async with asyncio.timeout(BOUND):
            while await store.readiness() is not None:  # noqa: ASYNC110 - the pool reconnects
                await asyncio.sleep(0.05)
    finally:
        await admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        await admin.close()
        await store.aclose()


def stored_task(task_id: str, state: int) -> pb.Task:
    task = pb.Task(id=task_id, context_id=f"c-{task_id}")
    task.status.state = state  # type: ignore[assignment]
    task.status.timestamp.GetCurrentTime()
    return task


#: What each store is given: two working tasks, one completed, one asking for input.
SAVED = {
    "t-1": pb.TASK_STATE_WORKING,
    "t-2": pb.TASK_STATE_WORKING,
    "t-3": pb.TASK_STATE_COMPLETED,
    "t-4": pb.TASK_STATE_INPUT_REQUIRED,
}
#: Two owners: the counts are of all owners.
OWNERS = [Caller(name="alice"), Caller(name="bob")]


async def tasks_gauge_of(store: TaskStore, metrics: Metrics) -> dict[str, float]:
    for n, (task_id, state) in enumerate(SAVED.items()):
        await store.save(TaskRecord(stored_task(task_id, state), OWNERS[n % 2]))
    metrics.count_tasks(store)
    await metrics.refresh()
    samples = parse(metrics.exposition().decode())
    gauge = [(dict(labels), v) for (name, labels), v in samples.items() if name == "a2a_tasks"]
    return {labels["state"]: v for labels, v in gauge}


def assert_counted(gauge: dict[str, float]) -> None:
    assert set(gauge) == set(TASK_STATES.values())  # every state, one label each
    assert gauge["TASK_STATE_WORKING"] == 2
    assert gauge["TASK_STATE_COMPLETED"] == 1
    assert gauge["TASK_STATE_INPUT_REQUIRED"] == 1
    assert gauge["TASK_STATE_FAILED"] == 0


async def test_tasks_by_state_from_the_memory_and_file_stores(
    tmp_path: Path, metrics: Metrics
) -> None:
    assert_counted(await tasks_gauge_of(MemoryTaskStore(), metrics))
    files = WorkspaceTaskStores(tmp_path)
    # A workspace caller of the default's own folder: its store shares the default's
    # index, counted once.
    files.store_for(Caller(name="carol", workspace=str(tmp_path)))
    try:
        assert_counted(await tasks_gauge_of(files, metrics))
        # A task that changes state moves between labels (the index's counts follow).
        await files.save(TaskRecord(stored_task("t-1", pb.TASK_STATE_COMPLETED), OWNERS[0]))
        await metrics.refresh()
        samples = parse(metrics.exposition().decode())
        assert value(samples, "a2a_tasks", state="TASK_STATE_WORKING") == 1
        assert value(samples, "a2a_tasks", state="TASK_STATE_COMPLETED") == 2
    finally:
        await files.aclose()


async def test_the_memory_stores_running_count_follows_replacements_and_evictions() -> None:
    # Kept as tasks come and go (never a walk at scrape time): a task saved again in
    # another state moves, an evicted one (past max_tasks, or too big to keep) leaves.
    store = MemoryTaskStore(max_tasks=3, max_bytes=4000)
    owner = OWNERS[0]
    for task_id, state in SAVED.items():  # four tasks into three places: t-1 evicted
        await store.save(TaskRecord(stored_task(task_id, state), owner))
    assert await store.count_by_state() == {
        pb.TASK_STATE_WORKING: 1,
        pb.TASK_STATE_COMPLETED: 1,
        pb.TASK_STATE_INPUT_REQUIRED: 1,
    }
    await store.save(TaskRecord(stored_task("t-4", pb.TASK_STATE_COMPLETED), owner))
    assert await store.count_by_state() == {pb.TASK_STATE_WORKING: 1, pb.TASK_STATE_COMPLETED: 2}
    big = stored_task("t-2", pb.TASK_STATE_FAILED)  # t-2 replaced by one too big to keep
    big.metadata["blob"] = "x" * 5000
    await store.save(TaskRecord(big, owner))
    assert await store.load(owner, "t-2") is None
    assert await store.count_by_state() == {pb.TASK_STATE_COMPLETED: 2}
    assert len(store) == 2


async def test_tasks_by_state_from_postgres(
    postgres: LocalPostgres,  # noqa: F811 - the fixture
    tmp_path: Path,
    metrics: Metrics,
) -> None:
    store = PostgresTaskStore(await fresh_database(postgres), box=SecretBox(tmp_path))
    try:
        await store.start()
        assert_counted(await tasks_gauge_of(store, metrics))
    finally:
        await store.aclose()


class _Counting:
    """A store's count that fails or hangs, as asked."""

    def __init__(self) -> None:
        self.answer: str = "ok"

    async def count_by_state(self) -> Mapping[int, int] | None:
        if self.answer == "fail":
            raise OSError("the disk is gone")
        if self.answer == "hang":
            await asyncio.Event().wait()
        return {pb.TASK_STATE_WORKING: 3}


async def test_a_failed_or_slow_count_leaves_the_gauge_out_and_the_scrape_answers(
    start_http: Starter, metrics: Metrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    import a2a_gateway.server.metrics as metrics_module

    monkeypatch.setattr(metrics_module, "TASK_COUNT_TIMEOUT_S", 0.05)
    store = _Counting()
    metrics.count_tasks(store)
    http = await start_http(metrics=metrics)
    status, text = await scrape(http)
    assert status == 200
    assert value(parse(text), "a2a_tasks", state="TASK_STATE_WORKING") == 3
    for answer in ("fail", "hang"):
        store.answer = answer
        status, text = await scrape(http)
        assert status == 200 and "a2a_requests" in text
        assert "a2a_tasks{" not in text
    store.answer = "ok"
    assert "a2a_tasks{" in (await scrape(http))[1]


def store_series(metrics: Metrics, store: str) -> dict[str, float]:
    """The store's series of a scrape: each operation's count, and its gauges."""
    samples = parse(metrics.exposition().decode())
    found = {
        dict(labels)["operation"]: v
        for (name, labels), v in samples.items()
        if name == "a2a_store_operation_seconds_count" and dict(labels)["store"] == store
    }
    for (name, labels), v in samples.items():
        if name.startswith("a2a_store_") and not name.startswith("a2a_store_operation"):
            assert dict(labels) == {"store": store}
            found[name.removeprefix("a2a_store_").removesuffix("_total")] = v
    return found


async def test_the_store_operations_are_timed_by_store_and_operation(metrics: Metrics) -> None:
    store = MemoryTaskStore()
    metrics.watch_store(store)
    for n, (task_id, state) in enumerate(SAVED.items()):
        await store.save(TaskRecord(stored_task(task_id, state), OWNERS[n % 2]))
    assert await store.load(OWNERS[0], "t-1") is not None
    assert await store.load(OWNERS[0], "t-2") is None  # bob's: not found, still timed
    assert len(await store.summaries(OWNERS[0])) == 2  # one listing
    assert await store.active_ids(OWNERS[0]) == ["t-1"]
    assert store_series(metrics, "memory") == {
        "load": 2,
        "save": 4,
        "listing": 1,
        "active_ids": 1,
        "lookup_message": 0,
        "lookup_or_claim": 0,
    }
    # Only this instance is timed: another memory store reports nothing here.
    await MemoryTaskStore().save(TaskRecord(stored_task("t-9", pb.TASK_STATE_WORKING), OWNERS[0]))
    assert store_series(metrics, "memory")["save"] == 4
    with pytest.raises(RuntimeError):
        metrics.watch_store(MemoryTaskStore())


async def test_the_file_stores_index_rebuilds_are_counted(tmp_path: Path) -> None:
    metrics = Metrics(process=False)
    files = WorkspaceTaskStores(tmp_path)
    metrics.watch_store(files)
    try:
        for task_id in ("t-1", "t-2"):
            await files.save(TaskRecord(stored_task(task_id, pb.TASK_STATE_WORKING), OWNERS[0]))
        assert len(await files.summaries(OWNERS[0])) == 2
        await files.default.index.wait_reconciled()
        # A new index is built from the task files: one rebuild; listing again is none.
        assert len(await files.summaries(OWNERS[0])) == 2
        series = store_series(metrics, "files")
        assert (series["index_rebuilds"], series["save"], series["listing"]) == (1, 2, 2)
    finally:
        await files.aclose()
    # A damaged index is rebuilt at the next start (a new process's count starts at 0).
    for leftover in WorkspaceLayout(tmp_path).state.glob(
        "index.sqlite3-*"
    ):  # its WAL would repair it
        leftover.unlink()
    WorkspaceLayout(tmp_path).task_index.write_bytes(b"not a database" * 100)
    metrics = Metrics(process=False)
    files = WorkspaceTaskStores(tmp_path)
    metrics.watch_store(files)
    try:
        assert len(await files.summaries(OWNERS[0])) == 2
        await files.default.index.wait_reconciled()
        assert store_series(metrics, "files")["index_rebuilds"] == 1
    finally:
        await files.aclose()


async def test_postgres_pool_use_and_listen_reconnects(
    postgres: LocalPostgres,  # noqa: F811 - the fixture
    tmp_path: Path,
    metrics: Metrics,
) -> None:
    from .test_pg_ops import listener_killed, until

    store = PostgresTaskStore(await fresh_database(postgres), box=SecretBox(tmp_path))
    admin = await asyncpg.connect(postgres.url)
    try:
        await store.start()
        metrics.watch_store(store)
        await store.save(TaskRecord(stored_task("t-1", pb.TASK_STATE_WORKING), OWNERS[0]))
        assert await store.load(OWNERS[0], "t-1") is not None
        series = store_series(metrics, "postgres")
        assert (series["save"], series["load"], series["listing"]) == (1, 1, 0)
        assert series["pool_max"] == store.pool_size
        assert series["pool_size"] >= 1
        assert series["pool_in_use"] == 0
        assert series["listen_reconnects"] == 0
        assert store._pool is not None
        async with store._pool.acquire():
            assert store_series(metrics, "postgres")["pool_in_use"] == 1
        async with listener_killed(admin, store):
            pass

        async def listening() -> bool:
            return store.listening

        await until(listening)
        assert store_series(metrics, "postgres")["listen_reconnects"] == 1
    finally:
        await store.aclose()
        await admin.close()
