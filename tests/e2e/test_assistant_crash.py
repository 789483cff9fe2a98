"""A ``serve --llm`` process killed (SIGKILL) in the middle of a turn leaves a transcript
that loads, and a restarted gateway goes on with the conversation from it."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

from a2a_gateway.agent.sessions import Session
from tests.support.ports import HOST, free_ports
from tests.support.processes import CARD_PATH, ServerProcess, gateway_command
from tests.support.workspace import write_callers

from ..agent.fake_llm import FakeLLM, Reply, Say, Stall
from ..agent.fake_llm_thread import fake_llm_in_thread

KEY = "crash-key-5e8d2c7a9b1f"
CONTEXT = "ctx-crash"


def start(workspace: Path, llm: FakeLLM, logs: Path, name: str) -> tuple[ServerProcess, str]:
    port, grpc_port = free_ports(2)
    command = gateway_command(workspace, port, grpc_port)
    command[command.index("--faux")] = "--llm"
    command += ["--llm-model", "fake-model", "--llm-base-url", llm.base_url]
    base = f"http://{HOST}:{port}"
    server = ServerProcess(name, command, logs, base + CARD_PATH, grpc_port=grpc_port)
    server.start()
    return server, base


def send(base: str, text: str, *, immediately: bool) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "role": "ROLE_USER",
                "messageId": f"m-{text}",
                "contextId": CONTEXT,
                "parts": [{"text": text}],
            },
            "configuration": {"returnImmediately": immediately},
        },
    }
    request = urllib.request.Request(
        base + "/a2a",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-API-Key": KEY, "A2A-Version": "1.0"},
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        result: dict[str, Any] = json.loads(response.read())["result"]
        return result


def test_kill_9_mid_turn_leaves_a_transcript_that_loads(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    write_callers(workspace, [{"name": "crash", "key": KEY}])
    stall = Stall(first="half an ans", every=0.02)
    streaming = threading.Event()
    replies: list[Reply] = [stall, Say("after the crash")]

    def responder(body: dict[str, Any]) -> Reply:
        streaming.set()
        return replies.pop(0)

    with fake_llm_in_thread(responder) as llm:
        server, base = start(workspace, llm, tmp_path, "gateway-llm-killed")
        try:
            send(base, "first question", immediately=True)
            assert streaming.wait(10)
        finally:
            assert server.proc is not None
            server.proc.kill()  # SIGKILL: no shutdown path runs
            server.proc.wait(10)
            server.proc = None
        scope = f"serve-a2a-crash_{CONTEXT}"
        session = Session(workspace.resolve(), scope, 0.0)
        session.load()
        assert [m["role"] for m in session.messages] == ["user"]
        assert session.messages[0]["content"].endswith("\n\nfirst question")

        server, base = start(workspace, llm, tmp_path, "gateway-llm-restarted")
        try:
            task = send(base, "second question", immediately=False)["task"]
        finally:
            assert server.stop() is None
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    messages = llm.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "user"]
    assert messages[1]["content"].endswith("first question")
    assert messages[2]["content"].endswith("second question")
