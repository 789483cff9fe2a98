"""The official SDK's A2A 0.3 gRPC client (``CompatGrpcTransport``) against the server under
test: ``a2a.v1.A2AService`` end to end, on the port that also serves 1.0.

The driver (``peers/sdk_client03.py --transport grpc``, in ``.venv-peer``) reads the
hybrid card, takes its 0.3 GRPC interface and runs one fixed script; the SDK converts
every 0.3 reply back to 1.0 types, so a shape we got wrong shows up here as a failed
scenario or a missing field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # for annotations only
    from .conftest import InteropServer

from tests.support.processes import PEER_PYTHON, PEERS, Results, run_script, scenario_result

DRIVER = PEERS / "sdk_client03.py"
DRIVER_TIMEOUT_S = 90.0  # the whole script; each call is bounded at 15 s by the driver
COMPLETED = "TASK_STATE_COMPLETED"
HOOK = "https://example.com/hook"


@pytest.fixture(scope="module")
def results(interop_server: InteropServer) -> Results:
    """Every scenario's line, by scenario name."""
    if interop_server.kind != "gateway":
        pytest.skip("the SDK stand-in (peers/sdk_server.py) serves no 0.3 interfaces")
    command = [str(PEER_PYTHON), str(DRIVER), "--card-url", interop_server.base_url]
    return run_script([*command, "--transport", "grpc"], DRIVER_TIMEOUT_S)


result = scenario_result


def texts(holder: dict[str, Any]) -> list[str]:
    return [part["text"] for part in holder.get("parts", []) if "text" in part]


def test_the_card_lists_the_0_3_grpc_interface(
    results: Results, interop_server: InteropServer
) -> None:
    assert result(results, "factory") == "JsonRpcTransport"  # 1.0 clients keep 1.0
    address = result(results, "interface")
    assert address.startswith("127.0.0.1:") and "://" not in address


def test_send(results: Results) -> None:
    task = result(results, "send")["task"]
    assert task["status"]["state"] == COMPLETED
    assert texts(task["artifacts"][0]) == ["hello 0.3"]


def test_stream_chunks(results: Results) -> None:
    events = result(results, "stream")
    assert "task" in events[0]
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert len(chunks) == 3
    assert [c.get("append", False) for c in chunks] == [False, True, True]
    assert chunks[-1].get("lastChunk") is True
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED


def test_get(results: Results) -> None:
    sent = result(results, "send")["task"]
    got = result(results, "get")
    assert got["id"] == sent["id"] and got["status"]["state"] == COMPLETED


def test_cancel_a_held_task(results: Results) -> None:
    held = result(results, "hold")["task"]
    assert held["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    canceled = result(results, "cancel")
    assert canceled["id"] == held["id"] and canceled["status"]["state"] == "TASK_STATE_CANCELED"


def test_multi_turn(results: Results) -> None:
    asked = result(results, "ask")["task"]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    answered = result(results, "answer")["task"]
    assert answered["id"] == asked["id"] and answered["status"]["state"] == COMPLETED


def test_push_config_crud(results: Results) -> None:
    task_id = result(results, "send")["task"]["id"]
    created = result(results, "push-set")
    assert created == {"taskId": task_id, "id": "cfg-1", "url": HOOK}
    assert result(results, "push-get") == created
    assert result(results, "push-list") == {"configs": [created]}
    assert result(results, "push-delete") == {"deleted": True}
    assert results["push-get-gone"]["error"]["type"] == "TaskNotFoundError"


def test_extended_card(results: Results) -> None:
    card = result(results, "extended-card")
    assert card["name"] and card["supportedInterfaces"][0]["protocolVersion"].startswith("0.3")


def test_an_error(results: Results) -> None:
    error = results["missing-task"]["error"]
    assert error["type"] == "TaskNotFoundError", error
