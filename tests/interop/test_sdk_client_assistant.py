"""The official a2a-sdk client holds a multi-turn conversation with ``serve --llm``
(the scripted provider behind it) on JSON-RPC, HTTP+JSON and gRPC: the model asks with
request_input, the task is input-required, the SDK answers on the same task, and the
answer reaches the model as the tool's result. A streamed answer reaches the SDK's text
helper whole (1.x and the 0.3 release), one text part in the task file, while a stream
still gets each delta."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.support.ports import HOST, free_ports
from tests.support.processes import (
    CARD_PATH,
    PEER03_PYTHON,
    SDK03_CLIENT,
    TRANSPORTS,
    ServerProcess,
    gateway_command,
    require_peer03_venv,
    require_peer_venv,
    run_script,
    scenario_result,
)
from tests.support.workspace import write_callers

from ..agent.fake_llm import Calls, FakeLLM, Reply, Say
from ..agent.fake_llm_thread import fake_llm_in_thread

SCHEMA = {"type": "object", "properties": {"day": {"type": "string"}}}
#: A 500-token answer, as the model streams it (newlines inside: the SDK's helper joins
#: parts with newlines, so one part per token would read differently, not only longer).
ESSAY = [f"word{i}" + ("\n" if i % 50 == 49 else " ") for i in range(500)]


def responder(body: dict[str, Any]) -> Reply:
    """essay in the user's text: the 500-token answer; ask:Q: ask Q; a tool result:
    confirm its last line."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Say(f"Booked: {last['content'].splitlines()[-1]}")
    if "essay" in last["content"]:
        return Say(chunks=ESSAY)
    question = last["content"].rsplit("ask:", 1)[-1]
    return Calls([("request_input", {"question": question, "schema": SCHEMA})])


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with fake_llm_in_thread(responder) as fake:
        yield fake


class Assistant(NamedTuple):
    card_url: str
    key: str
    workspace: Path


@pytest.fixture(scope="module")
def assistant_server(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> Iterator[Assistant]:
    require_peer_venv()
    port, grpc_port = free_ports(2)
    workspace = tmp_path_factory.mktemp("assistant-ws")
    # A leading "-" on purpose: 1 random key in 64 has one, and a driver given it as
    # "--api-key KEY" took it for an option (hence "--api-key=KEY" everywhere).
    key = "-" + secrets.token_urlsafe(24)
    write_callers(workspace, [{"name": "sdk", "key": key}])
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
        yield Assistant(base + CARD_PATH, key, workspace)


def test_multi_turn_request_input_then_answer(
    make_sdk_client: Callable[..., Any],
    assistant_server: Assistant,
    transport: str,
    llm: FakeLLM,
) -> None:
    card_url, key, _ = assistant_server
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


def stored_response_parts(workspace: Path, task_id: str) -> list[dict[str, Any]]:
    """The response artifact's parts in the task's file."""
    (path,) = workspace.rglob(f"{task_id}.json")
    task = json.loads(path.read_text())
    task = task.get("task", task)
    (response,) = (a for a in task["artifacts"] if a["name"] == "response")
    parts: list[dict[str, Any]] = response["parts"]
    return parts


def test_the_sdk_text_helper_reads_a_streamed_answer_whole(
    make_sdk_client: Callable[..., Any], assistant_server: Assistant, transport: str
) -> None:
    client = make_sdk_client(assistant_server.card_url, transport).keyed(assistant_server.key)
    whole = "".join(ESSAY)
    assert client("answer-text", f"essay, {transport}").only == {
        "answerText": whole,
        "getText": whole,
    }
    events = client("stream", f"essay streamed, {transport}").lines
    updates = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert [p["text"] for u in updates for p in u["artifact"]["parts"]] == ESSAY
    assert [u.get("append", False) for u in updates] == [False] + [True] * (len(ESSAY) - 1)
    task_id = updates[0]["taskId"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert stored_response_parts(assistant_server.workspace, task_id) == [{"text": whole}]


@pytest.mark.parametrize("binding", TRANSPORTS)
def test_a_0_3_client_reads_a_streamed_answer_whole(
    assistant_server: Assistant, binding: str
) -> None:
    require_peer03_venv()
    command = [str(PEER03_PYTHON), str(SDK03_CLIENT), "--card-url"]
    command += [assistant_server.card_url.removesuffix(CARD_PATH), "--transport", binding]
    command += [f"--api-key={assistant_server.key}", "--answer", f"essay, 0.3 {binding}"]
    results = run_script(command, 60.0)
    whole = "".join(ESSAY)
    assert scenario_result(results, "answer-text") == {"answerText": whole, "getText": whole}
    events = scenario_result(results, "answer-stream")
    chunks = [e["artifact"]["parts"] for e in events if e.get("kind") == "artifact-update"]
    assert [part["text"] for parts in chunks for part in parts] == ESSAY
