"""SIGTERM drains a real gateway process (docs/reliability.md "Drain"): calls in flight
finish, open streams end with the resumable UNAVAILABLE, nothing new gets in, the exit
is clean; a second signal or the grace running out stops at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.context import CallContext
from a2a_gateway.protocol.errors import UnavailableError
from a2a_gateway.serve import Signals
from a2a_gateway.server.engine import SHUTDOWN
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.ports import free_ports

from .conftest import BINDINGS, KEY_ALICE, Driver, WireError, running_gateway

DONE = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"


@dataclass
class Served:
    process: asyncio.subprocess.Process
    base: str
    grpc_target: str
    workspace: Path
    log: Path

    def driver(
        self, binding: str, http: aiohttp.ClientSession, channel: grpc.aio.Channel
    ) -> Driver:
        return Driver(binding, http, self.base, channel, key="")

    async def logged(self, text: str) -> None:
        """Until the server's log holds ``text``."""
        for _ in range(1500):
            if text in self.log.read_text():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{text!r} never logged")

    async def exit_status(self) -> int:
        """The process's exit status: waited for well beyond a drain of a few seconds,
        far less than the holds and graces a test uses to show an exit "at once"."""
        async with asyncio.timeout(30):
            return await self.process.wait()


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, *flags: str) -> AsyncIterator[Served]:
    port, grpc_port = free_ports(2)
    workspace = tmp_path / "ws"
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-P", "-m", "a2a_gateway", "serve", "--faux", "--allow-anonymous",
            "--workspace", str(workspace), "--port", str(port), "--grpc-port", str(grpc_port),
            *flags, stdout=out, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    served = Served(process, f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}", workspace, log)
    try:
        await _wait_ready(served.base)
        yield served
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert "Traceback" not in log.read_text()


async def _wait_ready(base: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(400):
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{base}/readyz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise AssertionError("server did not start")


def _send(text: str, context_id: str = "") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "ROLE_USER", "messageId": f"m-{context_id or text}"}
    message["parts"] = [{"text": text}]
    if context_id:
        message["contextId"] = context_id
    return {"message": message}


async def _until_working(driver: Driver, context_id: str) -> None:
    """Until the context's task runs (its blocking send is then in flight)."""
    for _ in range(400):
        listed = await driver.call("ListTasks", {"contextId": context_id})
        states = [task["status"]["state"] for task in listed.get("tasks", ())]
        if "TASK_STATE_WORKING" in states:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no working task in {context_id}")


async def _kept_alive(base: str) -> aiohttp.ClientSession:
    """A session whose one connection is open and idle (it answered a probe)."""
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
    async with http.get(f"{base}/healthz") as response:
        assert response.status == 200
        await response.read()
    return http


async def _stream_error(stream: AsyncIterator[dict[str, Any]]) -> WireError:
    """How an open stream ends (it must end with an error)."""
    with pytest.raises(WireError) as ended:
        async with asyncio.timeout(30):
            async for _ in stream:
                pass
    return ended.value


async def test_sigterm_drains_every_binding(tmp_path: Path) -> None:
    """One gateway, all three bindings at once: a blocking ``hold:3`` send and an open
    stream each, kept-alive HTTP connections, an open gRPC channel and a health watch.
    After SIGTERM the sends complete their tasks, the streams end UNAVAILABLE, new
    connections are refused and new calls on open ones get 503/UNAVAILABLE, readiness
    goes, and the process exits 0 without the grace running out."""
    async with (
        serving(tmp_path, "--shutdown-grace", "60") as served,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http,
        grpc.aio.insecure_channel(served.grpc_target) as channel,
    ):
        drivers = {binding: served.driver(binding, http, channel) for binding in BINDINGS}
        probe, rest_call, jsonrpc_call = [await _kept_alive(served.base) for _ in range(3)]
        try:
            health = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
            assert (await health.read()).status == health_pb2.HealthCheckResponse.SERVING
            sends = {
                binding: asyncio.create_task(
                    driver.call("SendMessage", _send("hold:3", f"hold-{binding}"))
                )
                for binding, driver in drivers.items()
            }
            streams = {
                binding: driver.open_stream(
                    "SendStreamingMessage", _send("hold:60", f"stream-{binding}")
                )
                for binding, driver in drivers.items()
            }
            for stream in streams.values():
                await anext(stream)  # the task: its run is live
            for binding in BINDINGS:
                await _until_working(drivers["jsonrpc"], f"hold-{binding}")

            served.process.send_signal(signal.SIGTERM)

            # The gRPC health service follows readiness before anything closes.
            assert (await health.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
            # Every open stream ends with the resumable close.
            for binding, stream in streams.items():
                ended = await _stream_error(stream)
                assert ended.reason == "UNAVAILABLE", binding
            # A kept-alive connection is answered, then closed.
            async with probe.get(f"{served.base}/readyz") as response:
                assert response.status == 503
                assert "drain" in (await response.json())["problems"]
            async with rest_call.get(f"{served.base}/a2a/v1/tasks") as response:
                assert response.status == 503
                assert response.headers["Retry-After"] == "1"
                assert response.headers["Connection"] == "close"
                assert (await response.json())["error"]["status"] == "UNAVAILABLE"
            body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
            async with jsonrpc_call.post(f"{served.base}/a2a", json=body) as response:
                assert response.headers["Retry-After"] == "1"
                error = (await response.json())["error"]
                assert [d["reason"] for d in error["data"]] == ["UNAVAILABLE"]
            # The open gRPC channel is told to go (GOAWAY): its new call is refused.
            with pytest.raises(WireError) as refused:
                await drivers["grpc"].call("ListTasks", {})
            assert refused.value.code == grpc.StatusCode.UNAVAILABLE
            # No new connection on either port.
            async with aiohttp.ClientSession() as fresh:
                with pytest.raises(aiohttp.ClientConnectionError):
                    await fresh.get(f"{served.base}/healthz")
            async with grpc.aio.insecure_channel(served.grpc_target) as new_channel:
                with pytest.raises(WireError) as refused:
                    await served.driver("grpc", http, new_channel).call("ListTasks", {})
                assert refused.value.code == grpc.StatusCode.UNAVAILABLE

            # The blocking sends finish with their tasks.
            for binding, send in sends.items():
                answer = await send
                assert answer["task"]["status"]["state"] == DONE, binding
            assert await served.exit_status() == 0
            health.cancel()
        finally:
            for session in (probe, rest_call, jsonrpc_call):
                await session.close()
    log = served.log.read_text()
    assert "draining" in log
    assert "grace ran out" not in log
    # The streams' runs were still going at the end: stopped, stored failed, files whole.
    tasks = [
        json.loads(path.read_text())["task"]
        for path in WorkspaceLayout(served.workspace).tasks.glob("*.json")
    ]
    held = [task for task in tasks if task["contextId"].startswith("hold-")]
    assert sorted(task["status"]["state"] for task in held) == [DONE] * 3
    stopped = [task for task in tasks if task["contextId"].startswith("stream-")]
    assert len(stopped) == len(tasks) - len(held) == 3
    for task in stopped:
        assert task["status"]["state"] == FAILED
        assert task["status"]["message"]["parts"][0]["text"] == SHUTDOWN
    assert not list(WorkspaceLayout(served.workspace).tasks.glob(".*"))  # no temp files


@pytest.mark.parametrize(
    ("binding", "how"), [("grpc", "second SIGTERM"), ("rest", "grace runs out")]
)
async def test_drain_stops_at_once(tmp_path: Path, binding: str, how: str) -> None:
    """A blocking ``hold:60`` send in flight: a second SIGTERM, or a grace shorter than
    the hold, stops the gateway at once: the run is stopped and the send answered with
    its failed task (the connection is still open), and the exit status is 0."""
    grace = "60" if how == "second SIGTERM" else "0.5"
    async with (
        serving(tmp_path, "--shutdown-grace", grace) as served,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http,
        grpc.aio.insecure_channel(served.grpc_target) as channel,
    ):
        driver = served.driver(binding, http, channel)
        send = asyncio.create_task(driver.call("SendMessage", _send("hold:60", "held")))
        await _until_working(served.driver("jsonrpc", http, channel), "held")
        served.process.send_signal(signal.SIGTERM)
        if how == "second SIGTERM":
            await served.logged("draining")  # two signals at once would be one
            served.process.send_signal(signal.SIGTERM)
        answer = await send
        assert await served.exit_status() == 0
    assert answer["task"]["status"]["state"] == FAILED
    assert answer["task"]["status"]["message"]["parts"][0]["text"] == SHUTDOWN
    log = served.log.read_text()
    assert ("stopping at once" in log) == (how == "second SIGTERM")
    assert ("grace ran out" in log) == (how == "grace runs out")


async def test_proxy_mode_drains(tmp_path: Path) -> None:
    """Proxy mode drains the same way (in process: Gateway.drain): a blocking send
    through the proxy completes, a stream through it ends UNAVAILABLE and the proxy
    refuses what comes next."""
    async with (
        running_gateway(tmp_path / "upstream") as upstream,
        running_gateway(
            tmp_path / "proxy",
            upstream=f"http://127.0.0.1:{upstream.http_port}",
            upstream_key=KEY_ALICE,
        ) as proxy,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.grpc_port}") as channel,
    ):
        through = Driver("grpc", http, f"http://127.0.0.1:{proxy.http_port}", channel)
        direct = Driver("jsonrpc", http, f"http://127.0.0.1:{upstream.http_port}", channel)
        send = asyncio.create_task(through.call("SendMessage", _send("hold:3", "held")))
        stream = through.open_stream("SendStreamingMessage", _send("hold:60", "streamed"))
        await anext(stream)
        await _until_working(direct, "held")
        assert await proxy.drain() is True  # the send answered within the grace
        assert (await send)["task"]["status"]["state"] == DONE
        assert (await _stream_error(stream)).reason == "UNAVAILABLE"
        with pytest.raises(UnavailableError):
            await proxy.service.get_task(pb.GetTaskRequest(id="t"), CallContext())


@pytest.mark.parametrize(
    ("sent", "drains"),
    [
        ((signal.SIGTERM,), True),
        ((signal.SIGTERM, signal.SIGTERM), False),
        ((signal.SIGINT,), False),
    ],
)
async def test_which_signals_drain(sent: tuple[signal.Signals, ...], drains: bool) -> None:
    """In process (serve's own Signals): a SIGTERM asks for a drain; a second signal,
    or SIGINT first, asks for a stop at once."""
    with Signals() as signals:
        async with asyncio.timeout(10):
            for sig in sent:
                os.kill(os.getpid(), sig)
                await signals.first.wait()  # handled before the next: two at once are one
            if drains:
                assert not signals.at_once.is_set()
            else:
                await signals.at_once.wait()
