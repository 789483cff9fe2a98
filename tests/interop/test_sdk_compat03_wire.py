"""Our 0.3 translations against the official SDK's own (``peers/sdk_wire03.py``, one
subprocess): what the SDK's 0.3 servers answer for the same 1.0 objects, what its 0.3
clients read from ours, and what they send us. No server: pure wire shapes, both ways."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import pytest
from google.protobuf import json_format

from a2a_gateway.protocol import codec, compat03
from a2a_gateway.server import grpc03
from lf.a2a.v0_3 import a2a_pb2 as pb03
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.processes import PEER_PYTHON, PEERS, ROOT, require_peer_venv

ORACLE = PEERS / "sdk_wire03.py"
ORACLE_TIMEOUT_S = 60.0
#: Not valid UTF-8, not base64 text: only a byte-exact translation keeps it.
CONTENT = b"\x00\xffhello\n"

TASK = pb.Task(
    id="t-1",
    context_id="c-1",
    status=pb.TaskStatus(
        state=pb.TASK_STATE_INPUT_REQUIRED,
        message=pb.Message(message_id="s-1", role=pb.ROLE_AGENT, parts=[pb.Part(text="more?")]),
    ),
    history=[
        pb.Message(
            message_id="m-1",
            role=pb.ROLE_USER,
            context_id="c-1",
            reference_task_ids=["t-0"],
            extensions=["urn:x"],
            parts=[
                pb.Part(raw=CONTENT, media_type="application/octet-stream", filename="a.bin"),
                pb.Part(url="https://files.example/b.png", media_type="image/png", filename="b"),
                pb.Part(text="hi"),
            ],
        )
    ],
    artifacts=[
        pb.Artifact(
            artifact_id="a-1",
            name="n",
            description="d",
            parts=[pb.Part(raw=CONTENT, filename="out.bin")],
        )
    ],
)

CARD: dict[str, Any] = {
    "name": "agent",
    "description": "d",
    "version": "1",
    "supportedInterfaces": [
        {"url": "https://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "https://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": "https://h/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
    ],
    "capabilities": {
        "streaming": True,
        "extendedAgentCard": True,
        "extensions": [{"uri": "urn:e", "description": "e"}],
    },
    "securitySchemes": {
        "key": {"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}},
        "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}},
    },
    "securityRequirements": [{"schemes": {"key": {"list": []}}}],
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "s", "name": "S", "description": "sd", "tags": ["t"]}],
}


def our_rest_task() -> Any:
    return compat03.rest_object(compat03.task_out(codec.to_dict(TASK)))


@pytest.fixture(scope="module")
def sdk() -> dict[str, Any]:
    require_peer_venv()
    given = {"task": codec.to_dict(TASK), "card": CARD, "rest_task": our_rest_task()}
    done = subprocess.run(
        [str(PEER_PYTHON), str(ORACLE)],
        cwd=ROOT,
        input=json.dumps(given).encode(),
        capture_output=True,
        timeout=ORACLE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_jsonrpc_task_is_the_sdk_s(sdk: dict[str, Any]) -> None:
    assert compat03.task_out(codec.to_dict(TASK)) == sdk["jsonrpc_task"]


def test_rest_file_bytes_are_written_as_the_sdk_writes_them(sdk: dict[str, Any]) -> None:
    """The SDK's 0.3 REST/gRPC code puts the base64 TEXT of the content in the 0.3
    proto's ``bytes`` field (so REST JSON carries it base64-encoded twice)."""
    ours = our_rest_task()
    theirs = sdk["rest_task"]
    assert ours["history"][0]["content"][0] == theirs["history"][0]["content"][0]
    assert ours["artifacts"][0]["parts"][0] == theirs["artifacts"][0]["parts"][0]


def test_sdk_rest_client_reads_our_file_bytes(sdk: dict[str, Any]) -> None:
    read = sdk["rest_task_read"]
    assert "error" not in read, read
    assert base64.b64decode(read["history"][0]["parts"][0]["raw"]) == CONTENT
    assert base64.b64decode(read["artifacts"][0]["parts"][0]["raw"]) == CONTENT
    assert read["history"][0]["parts"][1]["url"] == "https://files.example/b.png"


def test_sdk_rest_client_s_file_bytes_reach_the_service(sdk: dict[str, Any]) -> None:
    method = compat03.METHODS["message/send"]
    request = method.parse(compat03.rest_send_params(sdk["rest_send_body"]))
    assert isinstance(request, pb.SendMessageRequest)
    assert request.message.parts[0].raw == CONTENT
    assert request.message.parts[0].filename == "a.bin"
    assert request.message.parts[1].url == "https://files.example/b.png"


def test_sdk_grpc_client_s_file_bytes_reach_the_service(sdk: dict[str, Any]) -> None:
    wire = pb03.SendMessageRequest.FromString(base64.b64decode(sdk["grpc_send"]))
    send = next(rpc for rpc in grpc03.LEGACY_RPCS if rpc.wire == "SendMessage")
    request = send.method.parse(send.params(wire))
    assert isinstance(request, pb.SendMessageRequest)
    assert request.message.parts[0].raw == CONTENT


def test_our_grpc_file_bytes_are_the_sdk_s(sdk: dict[str, Any]) -> None:
    ours = json_format.ParseDict(our_rest_task(), pb03.Task())
    theirs = json_format.ParseDict(sdk["rest_task"], pb03.Task())
    assert ours.history[0].content[0].file == theirs.history[0].content[0].file


def test_our_rest_client_reads_the_sdk_s_file_bytes(sdk: dict[str, Any]) -> None:
    legacy = compat03.rest_result_in("GetTask", sdk["rest_task"])
    task = compat03.task_result_in(legacy)
    assert task.history[0].parts[0].raw == CONTENT
    assert task.artifacts[0].parts[0].raw == CONTENT


def test_our_rest_client_sends_file_bytes_as_the_sdk_does(sdk: dict[str, Any]) -> None:
    request = pb.SendMessageRequest(message=TASK.history[0])
    call = compat03.rest_call("SendMessage", request)
    assert call.body["message"]["content"] == sdk["rest_send_body"]["message"]["content"]


def test_hybrid_card_is_the_sdk_s(sdk: dict[str, Any]) -> None:
    ours = compat03.hybrid_card(codec.to_dict(json_format.ParseDict(CARD, pb.AgentCard())))
    theirs = sdk["hybrid_card"]
    # Deliberate: the 0.3 card-level version is semver "0.3.0" as 0.3 agents wrote it
    # (the SDK copies the interface's "0.3"; its own card parser defaults to "0.3.0").
    assert ours.pop("protocolVersion") == "0.3.0" and theirs.pop("protocolVersion") == "0.3"
    assert ours == theirs
