"""``serve --store postgres``: gateways on one PostgreSQL database.

Two gateways in this process (each with its own pool) on one database and one
workspace: a task sent to one is read, listed and found again by its messageId on the
other, and cancelled from the other; the task lives in the database, not in task files.

Both gateways real processes, on one database and workspace: a subscriber on B sees A's
run to its end; A killed with SIGKILL mid-run: B reports the run working while the lease
lasts, then failed "server restarted"; a paced ``chunks:`` stream sent to A and
subscribed on B (JSON-RPC and gRPC) mid-run gives B every chunk once, in order, then
completed; a task sent to A is read, listed (identical pages, tokens read by either),
found by its messageId, subscribed to and cancelled on B; two sends to one context at
once on A and B start one run. Four replicas started together migrate the schema once.
Start-up mistakes through the real command exit 2 with one line that never holds the
URL or its password.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import grpc
import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from a2a_gateway.server.pg_local import LocalPostgres
from a2a_gateway.server.pg_store import LISTENER_NAME, SCHEMA_VERSION
from a2a_gateway.settings import resolve
from tests.support.ports import free_port, free_ports
from tests.support.postgres import fresh_database
from tests.support.processes import GATEWAY, ServerProcess, run_gateway
from tests.support.workspace import write_callers

from .conftest import KEY_ALICE, Driver, WireError

KILLED_WAIT_S = 30.0  # bound on waiting for a killed gateway's lease to run out


def send(text: str, message_id: str | None = None) -> dict[str, Any]:
    return {
        "message": {
            "role": "ROLE_USER",
            "messageId": message_id or str(uuid.uuid4()),
            "parts": [{"text": text}],
        }
    }


def alices_workspace(tmp_path: Path) -> Path:
    """A workspace whose one caller is alice."""
    workspace = tmp_path / "ws"
    write_callers(workspace, [{"name": "alice", "key": KEY_ALICE}])
    return workspace


@pytest.fixture
async def database(postgres: LocalPostgres) -> str:
    return await fresh_database(postgres)


def settings(workspace: Path, url: str) -> dict[str, Any]:
    return {
        "workspace": [str(workspace)],
        "port": 0,
        "grpc_port": 0,
        "faux": True,
        "store": "postgres",
        "database_url": url,
        "database_pool_size": 2,
    }


@pytest.fixture
async def two_gateways(tmp_path: Path, database: str) -> AsyncIterator[list[Driver]]:
    workspace = alices_workspace(tmp_path)
    gateways = [Gateway(resolve(settings(workspace, database), environ={})) for _ in range(2)]
    drivers: list[Driver] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        try:
            for gateway in gateways:
                await gateway.start()
                channel = grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}")
                base = f"http://127.0.0.1:{gateway.http_port}"
                drivers.append(Driver("jsonrpc", http, base, channel))
            yield drivers
        finally:
            for driver in drivers:
                await driver.channel.close()
            for gateway in gateways:
                await gateway.stop()


async def test_a_task_sent_to_one_gateway_is_read_listed_and_retried_on_the_other(
    two_gateways: list[Driver], tmp_path: Path, database: str
) -> None:
    a, b = two_gateways
    message_id = str(uuid.uuid4())
    task = (await a.call("SendMessage", send("hello", message_id)))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    got = await b.call("GetTask", {"id": task["id"]})
    assert got["id"] == task["id"] and got["status"] == task["status"]
    await a.call("SendMessage", send("second"))
    listed_a = await a.call("ListTasks", {"pageSize": 1})
    listed_b = await b.call("ListTasks", {"pageSize": 1})
    assert listed_a["totalSize"] == listed_b["totalSize"] == 2
    assert [t["id"] for t in listed_a["tasks"]] == [t["id"] for t in listed_b["tasks"]]
    rest_b = await b.call("ListTasks", {"pageSize": 1, "pageToken": listed_b["nextPageToken"]})
    assert [t["id"] for t in rest_b["tasks"]] == [task["id"]]
    # The same message again, on the other gateway: the same task, no second run.
    again = (await b.call("SendMessage", send("hello", message_id)))["task"]
    assert again["id"] == task["id"]
    assert not WorkspaceLayout(tmp_path / "ws").tasks.exists()
    conn = await asyncpg.connect(database)
    try:
        assert await conn.fetchval("SELECT count(*) FROM a2a_tasks") == 2
    finally:
        await conn.close()


async def test_cancel_on_one_gateway_stops_the_run_on_the_other(
    two_gateways: list[Driver],
) -> None:
    a, b = two_gateways
    request = {**send("hold:60"), "configuration": {"returnImmediately": True}}
    task = (await a.call("SendMessage", request))["task"]
    cancelled = await b.call("CancelTask", {"id": task["id"]})
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    seen = await a.call("GetTask", {"id": task["id"]})
    assert seen["status"]["state"] == "TASK_STATE_CANCELED"


@contextlib.asynccontextmanager
async def process_and_gateway(
    tmp_path: Path, database: str, lease_s: float
) -> AsyncIterator[tuple[ServerProcess, Driver, Driver]]:
    """Gateways A and B as real processes on one database and workspace, with run
    leases of ``lease_s``: A's process, and a JSON-RPC driver for each."""
    workspace = alices_workspace(tmp_path)
    ports = free_ports(2)
    processes = []
    for name, port in zip("ab", ports, strict=True):
        command = [*GATEWAY, "serve", "--faux",
                   "--workspace", str(workspace), "--port", str(port), "--grpc-port", "-1",
                   "--store", "postgres", "--database-url", database,
                   "--database-lease", str(lease_s)]  # fmt: skip
        card = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
        processes.append(
            ServerProcess(f"pg-replica-{name}", command, tmp_path, card, grpc_port=None)
        )
    a, b = processes
    try:
        a.start()
        b.start()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            channel = grpc.aio.insecure_channel("127.0.0.1:1")  # unused: no gRPC here
            try:
                yield (
                    a,
                    Driver("jsonrpc", http, f"http://127.0.0.1:{ports[0]}", channel),
                    Driver("jsonrpc", http, f"http://127.0.0.1:{ports[1]}", channel),
                )
            finally:
                await channel.close()
    finally:
        complaints = [a.stop(), b.stop()]
    assert complaints == [None, None], complaints


async def test_a_run_of_a_killed_gateway_is_failed_by_the_other_after_its_lease(
    tmp_path: Path, database: str
) -> None:
    # A 2 s lease, renewed every 0.67 s: A may stall 1.3 s (a loaded CI machine)
    # before B could take its live run for a lost one.
    async with process_and_gateway(tmp_path, database, 2.0) as (a, on_a, on_b):
        request = {**send("hold:60"), "configuration": {"returnImmediately": True}}
        task = (await on_a.call("SendMessage", request))["task"]
        # Longer than the lease: A renews it, so B leaves the run alone.
        await asyncio.sleep(2.5)
        seen = await on_b.call("GetTask", {"id": task["id"]})
        assert seen["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        assert a.proc is not None
        a.proc.kill()  # SIGKILL: no final state written, no lease released
        a.proc.wait(30)
        a.proc = None
        deadline = time.monotonic() + KILLED_WAIT_S
        while True:
            seen = await on_b.call("GetTask", {"id": task["id"]})
            if seen["status"]["state"] == "TASK_STATE_FAILED" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    assert seen["status"]["state"] == "TASK_STATE_FAILED"
    assert seen["status"]["message"]["parts"][0]["text"] == "server restarted"


async def test_a_subscriber_on_one_gateway_sees_the_run_on_the_other_end(
    tmp_path: Path, database: str
) -> None:
    async with process_and_gateway(tmp_path, database, 30.0) as (_, on_a, on_b):
        request = {**send("hold:2"), "configuration": {"returnImmediately": True}}
        task = (await on_a.call("SendMessage", request))["task"]
        events = await on_b.stream("SubscribeToTask", {"id": task["id"]})
    assert events[0]["task"]["id"] == task["id"]
    assert events[0]["task"]["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    states = [e["statusUpdate"]["status"]["state"] for e in events[1:] if "statusUpdate" in e]
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert len(states) == len(set(states))  # each status once


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gateway(
        "serve", "--faux", "--port", "0", "--grpc-port", "-1",
        "--workspace", str(tmp_path / "ws"), "--store", "postgres", *args,
        timeout=60,
    )  # fmt: skip


def test_postgres_without_a_url_is_a_start_up_error(tmp_path: Path) -> None:
    result = _serve(tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--store postgres needs --database-url" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_database_never_shows_the_url_or_its_password(tmp_path: Path) -> None:
    password = "db-pass-4f1e8d2c7b"
    url = f"postgresql://a2a:{password}@127.0.0.1:{free_port()}/postgres"
    result = _serve(tmp_path, "--database-url", url)
    assert result.returncode == 2, result.stderr
    assert "--database-url: cannot connect to the database" in result.stderr
    assert password not in result.stderr + result.stdout
    assert "postgresql://" not in result.stderr
    assert "Traceback" not in result.stderr


@contextlib.asynccontextmanager
async def two_processes(
    tmp_path: Path, database: str, *flags: str
) -> AsyncIterator[tuple[Driver, Driver, Driver]]:
    """Gateways A and B as real processes on one database and workspace (``serve``
    with ``flags`` besides): a JSON-RPC driver for A, then a JSON-RPC and a gRPC driver
    for B."""
    workspace = alices_workspace(tmp_path)
    ports = free_ports(4)

    def command(http_port: int, grpc_port: int) -> list[str]:
        return [*GATEWAY, "serve", "--faux",
                "--workspace", str(workspace), "--port", str(http_port),
                "--grpc-port", str(grpc_port), "--store", "postgres", "--database-url", database,
                "--database-pool-size", "2", *flags]  # fmt: skip

    gateways = [
        ServerProcess(
            f"pg-replica-{name}",
            command(http_port, grpc_port),
            tmp_path,
            f"http://127.0.0.1:{http_port}/.well-known/agent-card.json",
            grpc_port=grpc_port,
        )
        for name, http_port, grpc_port in (("a", *ports[:2]), ("b", *ports[2:]))
    ]
    complaints: list[str | None] = []
    try:
        for gateway in gateways:
            gateway.start()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{ports[3]}")
            try:
                yield (
                    Driver("jsonrpc", http, f"http://127.0.0.1:{ports[0]}", channel),
                    Driver("jsonrpc", http, f"http://127.0.0.1:{ports[2]}", channel),
                    Driver("grpc", http, f"http://127.0.0.1:{ports[2]}", channel),
                )
            finally:
                await channel.close()
    finally:
        complaints = [gateway.stop() for gateway in gateways]
    assert complaints == [None, None], complaints


def chunk_texts(events: list[dict[str, Any]]) -> list[str]:
    """The chunk texts a subscriber saw, in order: the snapshot's artifact parts, then
    those of each artifact update."""
    texts: list[str] = []
    for event in events:
        artifacts = event["task"].get("artifacts", []) if "task" in event else []
        if "artifactUpdate" in event:
            artifacts = [event["artifactUpdate"]["artifact"]]
        for artifact in artifacts:
            texts.extend(part["text"] for part in artifact["parts"])
    return texts


async def test_a_chunks_stream_subscribed_on_the_other_process_gets_every_chunk_in_order(
    tmp_path: Path, database: str
) -> None:
    count = 40
    expected = [f"chunk-{i}" for i in range(count)]
    async with two_processes(tmp_path, database) as (on_a, on_b, on_b_grpc):
        stream = on_a.open_stream("SendStreamingMessage", send(f"chunks:{count}:100"))
        seen_on_a: list[dict[str, Any]] = []
        while not any("artifactUpdate" in e for e in seen_on_a):
            seen_on_a.append(await anext(stream))
        task_id = next(e["task"]["id"] for e in seen_on_a if "task" in e)

        async def rest_of_a() -> list[dict[str, Any]]:
            return seen_on_a + [e async for e in stream]

        on_a_all, on_b_json, on_b_grpc_all = await asyncio.gather(
            rest_of_a(),
            on_b.stream("SubscribeToTask", {"id": task_id}),
            on_b_grpc.stream("SubscribeToTask", {"id": task_id}),
        )
    assert chunk_texts(on_a_all) == expected
    for events in (on_b_json, on_b_grpc_all):
        assert events[0]["task"]["id"] == task_id
        # WORKING is stored by a background save: the snapshot may still say SUBMITTED.
        assert events[0]["task"]["status"]["state"] in (
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
        )
        # The run was still going: B saw chunks as events, not only in its snapshot.
        assert any("artifactUpdate" in e for e in events[1:])
        # Each chunk once, in order (a stored snapshot holds the text so far as one part).
        assert "".join(chunk_texts(events)) == "".join(expected)
        final = events[-1]["statusUpdate"]["status"]["state"]
        assert final == "TASK_STATE_COMPLETED"
        assert not any("task" in e for e in events[1:])


# --- two real processes: the "Done when" lines, each across processes ----------


async def test_processes_share_reads_pages_retries_subscriptions_and_cancels(
    tmp_path: Path, database: str
) -> None:
    async with two_processes(tmp_path, database) as (on_a, on_b, _):
        message_id = str(uuid.uuid4())
        task = (await on_a.call("SendMessage", send("hello", message_id)))["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        got = await on_b.call("GetTask", {"id": task["id"]})
        assert got["id"] == task["id"] and got["status"] == task["status"]
        assert got["artifacts"] == task["artifacts"]
        second = (await on_b.call("SendMessage", send("second")))["task"]

        # Identical pages on both, and a page token from one is read by the other.
        page_a = await on_a.call("ListTasks", {"pageSize": 1})
        page_b = await on_b.call("ListTasks", {"pageSize": 1})
        assert page_a == page_b
        assert [t["id"] for t in page_a["tasks"]] == [second["id"]]
        assert page_a["totalSize"] == 2
        rest_on_b = await on_b.call(
            "ListTasks", {"pageSize": 1, "pageToken": page_a["nextPageToken"]}
        )
        rest_on_a = await on_a.call(
            "ListTasks", {"pageSize": 1, "pageToken": page_b["nextPageToken"]}
        )
        assert rest_on_a == rest_on_b
        assert [t["id"] for t in rest_on_b["tasks"]] == [task["id"]]

        # The same messageId on the other process: the same task, not a second run.
        again = (await on_b.call("SendMessage", send("hello", message_id)))["task"]
        assert again["id"] == task["id"]
        assert (await on_a.call("ListTasks", {}))["totalSize"] == 2

        # A run on A, subscribed to and cancelled on B: the run stops where it runs.
        held = {**send("hold:60"), "configuration": {"returnImmediately": True}}
        running = (await on_a.call("SendMessage", held))["task"]
        subscription = on_b.open_stream("SubscribeToTask", {"id": running["id"]})
        snapshot = await anext(subscription)
        assert snapshot["task"]["id"] == running["id"]
        assert snapshot["task"]["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        cancelled = await on_b.call("CancelTask", {"id": running["id"]})
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        events = [e async for e in subscription]
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
        seen_on_a = await on_a.call("GetTask", {"id": running["id"]})
        assert seen_on_a["status"]["state"] == "TASK_STATE_CANCELED"


async def listeners(conn: asyncpg.Connection) -> set[int]:
    """The backends of the gateways' LISTEN connections to this database."""
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
        " AND datname = current_database()",
        LISTENER_NAME,
    )
    return {int(r[0]) for r in rows}


async def test_gateway_processes_listen_again_after_their_listen_connections_are_killed(
    tmp_path: Path, database: str
) -> None:
    conn = await asyncpg.connect(database)
    try:
        async with two_processes(tmp_path, database) as (on_a, on_b, _):
            held = {**send("hold:60"), "configuration": {"returnImmediately": True}}
            running = (await on_a.call("SendMessage", held))["task"]
            subscription = on_b.open_stream("SubscribeToTask", {"id": running["id"]})
            assert (await anext(subscription))["task"]["id"] == running["id"]
            killed = await listeners(conn)
            assert len(killed) == 2  # one per gateway
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid", list(killed)
            )
            deadline = time.monotonic() + 30
            while True:  # both gateways open a new one (bounded)
                now = await listeners(conn)
                if (len(now) == 2 and not now & killed) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert len(now) == 2 and not now & killed
            # Cancels and events cross the gateways again: B's cancel stops A's run,
            # and B's subscription (opened before the kill) sees it end.
            cancelled = await on_b.call("CancelTask", {"id": running["id"]})
            assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
            events = [e async for e in subscription]
            assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    finally:
        await conn.close()
    for name in ("a", "b"):
        stderr = (tmp_path / f"pg-replica-{name}.stderr").read_text()
        assert "lost the database connection that hears cancels" in stderr


async def test_two_sends_to_one_context_on_two_processes_at_once_run_once(
    tmp_path: Path, database: str
) -> None:
    async with two_processes(tmp_path, database) as (on_a, on_b, _):
        for attempt in range(3):
            context_id = f"ctx-race-{attempt}"
            request = {
                "message": {**send("hold:60")["message"], "contextId": context_id},
                "configuration": {"returnImmediately": True},
            }
            outcomes = await asyncio.gather(
                on_a.call("SendMessage", request),
                on_b.call("SendMessage", {**request, "message": {**request["message"],
                          "messageId": str(uuid.uuid4())}}),
                return_exceptions=True,
            )  # fmt: skip
            started = [o for o in outcomes if isinstance(o, dict)]
            refused = [o for o in outcomes if isinstance(o, WireError)]
            assert len(started) == 1 and len(refused) == 1, outcomes
            assert "context" in refused[0].message
            listed = await on_b.call("ListTasks", {"contextId": context_id})
            assert [t["id"] for t in listed["tasks"]] == [started[0]["task"]["id"]]
            await on_b.call("CancelTask", {"id": started[0]["task"]["id"]})


def start_together(replicas: list[ServerProcess]) -> None:
    """Launch every replica before waiting for any to be ready."""
    for replica in replicas:
        with replica.stdout_path.open("wb") as out, replica.stderr_path.open("wb") as err:
            replica.proc = subprocess.Popen(
                replica.command, stdin=subprocess.DEVNULL, stdout=out, stderr=err
            )
    for replica in replicas:
        replica._wait_ready()


async def test_replicas_starting_together_create_the_schema_once(
    tmp_path: Path, database: str
) -> None:
    workspace = tmp_path / "ws"
    WorkspaceLayout(workspace).state.mkdir(parents=True)
    replicas: list[ServerProcess] = []
    for n, port in enumerate(free_ports(4)):
        command = [*GATEWAY, "serve", "--faux",
                   "--workspace", str(workspace), "--port", str(port), "--grpc-port", "-1",
                   "--store", "postgres", "--database-url", database,
                   "--log-level", "info"]  # fmt: skip
        card = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
        replicas.append(ServerProcess(f"pg-start-{n}", command, tmp_path, card, grpc_port=None))
    try:
        await asyncio.to_thread(start_together, replicas)
    finally:
        complaints = [replica.stop() for replica in replicas]
    assert complaints == [None] * len(replicas), complaints
    logs = "".join(r.stderr_path.read_text() for r in replicas)
    for version in range(1, SCHEMA_VERSION + 1):
        assert logs.count(f"schema migrated to version {version}\n") == 1, (version, logs)
    conn = await asyncpg.connect(database)
    try:
        versions = await conn.fetch("SELECT version FROM a2a_schema ORDER BY version")
    finally:
        await conn.close()
    assert [r["version"] for r in versions] == list(range(1, SCHEMA_VERSION + 1))
