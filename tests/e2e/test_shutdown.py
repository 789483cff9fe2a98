"""SIGTERM: open streams end, runs stop, every task file is whole, and the exit is clean."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import aiohttp

from a2a_gateway.protocol import sse

from ..interop.conftest import free_ports


async def _wait_for_card(port: int) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(400):
            try:
                async with http.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json"):
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise AssertionError("server did not start")


async def test_sigterm_ends_streams_and_leaves_valid_task_files(tmp_path: Path) -> None:
    port, grpc_port = free_ports(2)
    workspace = tmp_path / "ws"
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-P", "-m", "a2a_gateway", "serve", "--faux", "--allow-anonymous",
            "--workspace", str(workspace), "--port", str(port), "--grpc-port", str(grpc_port),
            stdout=out, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    try:
        await _wait_for_card(port)
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": {
                "message": {
                    "role": "ROLE_USER",
                    "messageId": "m-hold",
                    "parts": [{"text": "hold:60"}],
                }
            },
        }
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"http://127.0.0.1:{port}/a2a", json=body) as response,
        ):
            assert response.content_type == sse.CONTENT_TYPE
            decoder = sse.Decoder()
            events: list[dict[str, object]] = []
            async with asyncio.timeout(20):
                async for chunk in response.content.iter_any():
                    for event in decoder.feed(chunk):
                        events.append(json.loads(event.data))
                        if len(events) == 2:  # task, then WORKING: the run is live
                            process.send_signal(signal.SIGTERM)
            # The stream ended (did not hang) once the server shut down.
        async with asyncio.timeout(20):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    task_id = events[0]["result"]["task"]["id"]  # type: ignore[index]
    files = list((workspace / ".a2a" / "tasks").glob("*.json"))
    assert [f.name for f in files] == [f"{task_id}.json"]
    stored = json.loads(files[0].read_text())
    status = stored["task"]["status"]
    assert status["state"] == "TASK_STATE_FAILED"
    assert "shut down" in status["message"]["parts"][0]["text"]
    assert not list((workspace / ".a2a" / "tasks").glob(".*"))  # no temp files left
    assert "Traceback" not in log.read_text()
