"""The official a2a-sdk client holds a multi-turn conversation with ``serve --llm``
(the scripted provider behind it) on JSON-RPC, HTTP+JSON and gRPC: the model asks with
request_input, the task is input-required, the SDK answers on the same task, and the
answer reaches the model as the tool's result."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..agent.fake_llm import Calls, FakeLLM, Reply, Say
from ..agent.fake_llm_thread import fake_llm_in_thread
from .conftest import (
    CARD_PATH,
    HOST,
    ServerProcess,
    free_ports,
    gateway_command,
    require_peer_venv,
)

SCHEMA = {"type": "object", "properties": {"day": {"type": "string"}}}


def responder(body: dict[str, Any]) -> Reply:
    """ask:Q in the user's text: ask Q; a tool result: confirm its last line."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Say(f"Booked: {last['content'].splitlines()[-1]}")
    question = last["content"].rsplit("ask:", 1)[-1]
    return Calls([("request_input", {"question": question, "schema": SCHEMA})])


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with fake_llm_in_thread(responder) as fake:
        yield fake


@pytest.fixture(scope="module")
def assistant_server(
    tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM
) -> Iterator[tuple[str, str]]:
    require_peer_venv()
    port, grpc_port = free_ports(2)
    workspace = tmp_path_factory.mktemp("assistant-ws")
    key = secrets.token_urlsafe(24)
    (workspace / ".a2a").mkdir()
    (workspace / ".a2a" / "callers.json").write_text(json.dumps([{"name": "sdk", "key": key}]))
    command = gateway_command(workspace, port, grpc_port)
    command[command.index("--faux")] = "--llm"
    command += ["--llm-model", "fake-model", "--llm-base-url", llm.base_url]
    command += ["--llm-max-retries", "0"]
    base = f"http://{HOST}:{port}"
    server = ServerProcess(
        "gateway-llm",
        command,
        tmp_path_factory.mktemp("assistant-logs"),
        base + CARD_PATH,
        grpc_port=grpc_port,
    )
    with server.running():
        yield base + CARD_PATH, key


def test_multi_turn_request_input_then_answer(
    make_sdk_client: Callable[..., Any],
    assistant_server: tuple[str, str],
    transport: str,
    llm: FakeLLM,
) -> None:
    card_url, key = assistant_server
    client = make_sdk_client(card_url, transport).keyed(key)
    before = len(llm.requests)
    lines = client("multi-turn", f"Which day, {transport}?", f"Monday via {transport}").lines
    first, second = (line["task"] for line in lines)
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert first["status"]["message"]["parts"][0]["text"] == f"Which day, {transport}?"
    tagged = first["status"]["message"]["parts"][1]
    assert tagged["data"] == {"schema": SCHEMA}
    # The official client sees the question's tag (media type and metadata).
    assert tagged["mediaType"] == "application/vnd.everruns.ask-user+json"
    assert tagged["metadata"] == {"kind": "everruns/ask_user"}
    assert (second["id"], second["contextId"]) == (first["id"], first["contextId"])
    assert second["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [p["text"] for a in second["artifacts"] for p in a["parts"]] == [
        f"Booked: Monday via {transport}"
    ]
    # The model got the answer as the tool's result, under the framing header.
    answer = llm.requests[before + 1]["messages"][-1]
    assert answer["role"] == "tool"
    assert answer["content"].startswith("[A2A message from the external agent 'sdk'")
    assert answer["content"].endswith(f"Monday via {transport}")
