"""The official SDK's A2A 0.3 compat clients (``CompatJsonRpcTransport``,
``CompatRestTransport``, ``CompatGrpcTransport``) against the server under test: the 0.3
bridge end to end, on JSON-RPC, HTTP+JSON and gRPC (``a2a.v1.A2AService``, on the port
that also serves 1.0); each test runs once per binding.

The driver (``peers/sdk_client03.py``, in ``.venv-peer``) reads the hybrid card, takes
its 0.3 interface for the binding, runs one fixed script against the module's server and
prints one line per scenario; the tests below assert on what the SDK surfaced (it
converts every 0.3 reply back to 1.0 types, so a shape we got wrong shows up as a
pydantic error, a failed scenario or a missing field here).
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


@pytest.fixture(scope="module", params=["jsonrpc", "rest", "grpc"])
def binding(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def results(interop_server: InteropServer, binding: str) -> Results:
    """Every scenario's line, by scenario name (the script runs once per binding)."""
    if interop_server.kind != "gateway":
        pytest.skip("the SDK stand-in (peers/sdk_server.py) serves no 0.3 interfaces")
    command = [str(PEER_PYTHON), str(DRIVER), "--card-url", interop_server.base_url]
    return run_script([*command, "--transport", binding], DRIVER_TIMEOUT_S)


result = scenario_result


def texts(holder: dict[str, Any]) -> list[str]:
    return [part["text"] for part in holder.get("parts", []) if "text" in part]


def test_sdk_1_0_factory_still_picks_1_0_and_the_card_lists_0_3(
    results: Results, interop_server: InteropServer, binding: str
) -> None:
    assert result(results, "factory") == "JsonRpcTransport"  # 1.0 clients keep 1.0
    address = result(results, "interface")
    if binding == "grpc":  # the 0.3 GRPC interface: host:port, no scheme
        assert address.startswith("127.0.0.1:") and "://" not in address
    else:
        assert address.startswith(interop_server.base_url)


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


def test_push_config_crud(results: Results, binding: str) -> None:
    task_id = result(results, "send")["task"]["id"]
    created = result(results, "push-set")
    assert created == {"taskId": task_id, "id": "cfg-1", "url": HOOK}
    assert result(results, "push-get") == created
    if binding == "rest":  # the SDK's 0.3 REST client has no list/delete
        assert results["push-list"]["error"]["type"] == "NotImplementedError"
        return
    assert result(results, "push-list") == {"configs": [created]}
    assert result(results, "push-delete") == {"deleted": True}
    gone = results["push-get-gone"]["error"]
    assert gone["type"] == "TaskNotFoundError"


def test_extended_card(results: Results) -> None:
    card = result(results, "extended-card")
    assert card["name"] and card["supportedInterfaces"][0]["protocolVersion"].startswith("0.3")


def test_an_error(results: Results) -> None:
    error = results["missing-task"]["error"]
    assert error["type"] == "TaskNotFoundError", error
