"""The a2a-sdk 0.3.x release's own clients (``peers/sdk03_client.py`` in ``.venv-peer03``)
against our gateway's 0.3 surfaces, on JSON-RPC, HTTP+JSON and gRPC (``a2a.v1.A2AService``),
and the JS SDK's 0.3 clients (``peers/js03/drive03.mjs``, ``@a2a-js/sdk`` 0.3.14, run by
node) on JSON-RPC and HTTP+JSON.

Unlike the 1.x SDK's compat clients (``test_sdk_compat03_*``), these are the clients
deployed 0.3 callers run, and they read our answers as 0.3 JSON: a shape, a state or a
``final`` flag we got wrong shows up here. Our gateway is started once for the module (with
webhooks allowed on loopback); the driver runs its whole script once per binding.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from tests.support.ports import HOST, free_ports
from tests.support.processes import (
    CARD_PATH,
    PEER03_PYTHON,
    PEERS,
    SDK03_CLIENT,
    Results,
    ServerProcess,
    gateway_command,
    require_peer03_venv,
    run_script,
    scenario_result,
)
from tests.support.workspace import write_callers

from .conftest import EXTENDED_CARD_JSON

DRIVER_TIMEOUT_S = 120.0  # the whole script; each scenario is bounded at 15 s by the driver
HOOK_TOKEN = "hook-t0k"  # peers/sdk03_client.py
result = scenario_result


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Our gateway (faux agent, webhooks on loopback allowed) and a caller key."""
    require_peer03_venv()
    workspace = tmp_path_factory.mktemp("workspace")
    # A leading "-" on purpose: 1 random key in 64 has one, and a driver given it as
    # "--api-key KEY" took it for an option (hence "--api-key=KEY" everywhere).
    key = "-" + secrets.token_urlsafe(24)
    state = WorkspaceLayout(workspace).state
    state.mkdir()
    write_callers(workspace, [{"name": "sdk03", "key": key}])
    (state / "card.json").write_text(json.dumps(EXTENDED_CARD_JSON))
    port, grpc_port = free_ports(2)
    base = f"http://{HOST}:{port}"
    command = [*gateway_command(workspace, port, grpc_port), "--allow-private-urls"]
    server = ServerProcess(
        "gateway", command, tmp_path_factory.mktemp("logs"), base + CARD_PATH, grpc_port
    )
    with server.running():
        yield base, key


@pytest.fixture(scope="module", params=["jsonrpc", "rest", "grpc"])
def binding(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="module")
def results(gateway: tuple[str, str], binding: str) -> Results:
    """Every scenario's line, by scenario name (the script runs once per binding)."""
    base, key = gateway
    command = [str(PEER03_PYTHON), str(SDK03_CLIENT), "--card-url", base, f"--api-key={key}"]
    return run_script([*command, "--transport", binding], DRIVER_TIMEOUT_S)


def texts(holder: dict[str, Any]) -> list[str]:
    return [part["text"] for part in holder.get("parts", []) if part.get("kind") == "text"]


def status_updates(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("kind") == "status-update"]


def test_the_card_is_a_0_3_card(results: Results, gateway: tuple[str, str]) -> None:
    card = result(results, "card")
    assert card["protocolVersion"] == "0.3.0" and card["url"].startswith(gateway[0])
    assert {i["transport"] for i in card["additionalInterfaces"]} >= {"HTTP+JSON", "GRPC"}


def test_blocking_send_completes(results: Results) -> None:
    task = result(results, "send")
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    assert texts(task["artifacts"][0]) == ["hello 0.3"]


def test_without_blocking_json_rpc_blocks_and_the_others_do_not(
    results: Results, binding: str
) -> None:
    """0.3 JSON-RPC clients expect an absent ``blocking`` to block; on 0.3 HTTP+JSON and
    gRPC it is a proto3 bool, absent = false."""
    task = result(results, "send-absent")
    if binding == "jsonrpc":
        assert task["status"]["state"] == "completed"
        return
    assert task["status"]["state"] in ("submitted", "working")
    assert result(results, "send-absent-cancel")["status"]["state"] == "canceled"


def test_non_blocking_send_returns_at_once(results: Results) -> None:
    task = result(results, "send-nonblocking")
    assert task["status"]["state"] in ("submitted", "working")


def test_resubscribe_sees_the_cancel_as_the_final_event(results: Results) -> None:
    held = result(results, "send-nonblocking")
    seen = result(results, "resubscribe")
    assert seen["cancel"]["id"] == held["id"] and seen["cancel"]["status"]["state"] == "canceled"
    last = seen["events"][-1]
    assert last["kind"] == "status-update" and last["status"]["state"] == "canceled"
    assert last["final"] is True
    assert result(results, "get-cancelled")["status"]["state"] == "canceled"


def test_get(results: Results) -> None:
    sent = result(results, "send")
    got = result(results, "get")
    assert got["id"] == sent["id"] and got["status"]["state"] == "completed"
    assert texts(got["history"][0]) == ["hello 0.3"]


def test_stream_ends_with_a_final_completed_update(results: Results) -> None:
    events = result(results, "stream")
    assert events[0]["kind"] == "task"
    chunks = [e for e in events if e["kind"] == "artifact-update"]
    assert [texts(c["artifact"]) for c in chunks] == [["chunk-0"], ["chunk-1"], ["chunk-2"]]
    updates = status_updates(events)
    assert updates[-1]["status"]["state"] == "completed" and updates[-1]["final"] is True
    assert [u["final"] for u in updates[:-1]] == [False] * (len(updates) - 1)


def test_a_stream_that_asks_ends_with_a_final_input_required_update(results: Results) -> None:
    """A 0.3 stream ends on ``final: true``: input-required is where this one ends."""
    events = result(results, "stream-ask")
    last = events[-1]
    assert last["kind"] == "status-update" and last["status"]["state"] == "input-required"
    assert last["final"] is True


def test_multi_turn(results: Results) -> None:
    asked = result(results, "ask")
    assert asked["status"]["state"] == "input-required"
    assert texts(asked["status"]["message"]) == ["What colour?"]
    answered = result(results, "answer")
    assert answered["id"] == asked["id"] and answered["status"]["state"] == "completed"
    assert texts(answered["artifacts"][-1]) == ["blue"]


def test_push_config_crud(results: Results, binding: str) -> None:
    task_id = result(results, "send")["id"]
    created = result(results, "push-set")
    assert created["taskId"] == task_id
    config = created["pushNotificationConfig"]
    assert (config["id"], config["url"]) == ("cfg-1", "https://example.com/hook")
    assert not config.get("token"), "the token is never given back"
    assert result(results, "push-get") == created
    listed = result(results, "push-list")
    assert [(c["taskId"], c["pushNotificationConfig"]["id"]) for c in listed] == [
        (task_id, "cfg-1")
    ]
    assert result(results, "push-delete") == {"deleted": True}
    gone = results["push-get-gone"]["error"]
    assert gone["code"] == {"jsonrpc": -32001, "rest": 404, "grpc": "NOT_FOUND"}[binding]


def test_a_config_set_over_0_3_gets_0_3_deliveries(results: Results) -> None:
    """Each webhook body is a bare 0.3 Task the SDK's own model accepts (not 1.0's
    ``{"task": …}``), with the config's token."""
    delivery = result(results, "push-delivery")
    assert delivery["answered"]["status"]["state"] == "completed"
    deliveries = delivery["deliveries"]
    assert deliveries, "nothing was delivered"
    for item in deliveries:
        assert item["sdk_task_error"] is None, item
        assert item["body"]["kind"] == "task" and item["token"] == HOOK_TOKEN
    assert deliveries[-1]["body"]["status"]["state"] == "completed"
    assert texts(deliveries[-1]["body"]["artifacts"][-1]) == ["Lisbon"]


def test_extended_card(results: Results) -> None:
    card = result(results, "extended-card")
    assert card["name"] == EXTENDED_CARD_JSON["name"]
    assert card["protocolVersion"] == "0.3.0"


def test_an_unknown_task(results: Results, binding: str) -> None:
    error = results["missing-task"]["error"]
    assert error["code"] == {"jsonrpc": -32001, "rest": 404, "grpc": "NOT_FOUND"}[binding]


# --- the JS SDK's 0.3 clients (@a2a-js/sdk 0.3.14) ------------------------------------------

JS_DRIVER = PEERS / "js03" / "drive03.mjs"
JS_MODULES = PEERS / "js03" / "node_modules" / "@a2a-js" / "sdk"


@pytest.fixture(scope="module", params=["jsonrpc", "rest"])
def js_results(request: pytest.FixtureRequest, gateway: tuple[str, str]) -> Results:
    node = shutil.which("node")
    if node is None or not JS_MODULES.is_dir():
        pytest.skip("the JS SDK's 0.3 client is not installed (`make peer` needs node and npm)")
    base, key = gateway
    return run_script([node, str(JS_DRIVER), base, request.param, key], DRIVER_TIMEOUT_S)


def test_js_send_blocking_and_absent(js_results: Results) -> None:
    task = result(js_results, "send")
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    assert texts(task["artifacts"][0]) == ["hello js 0.3"]
    absent = result(js_results, "send-absent")
    if "send-absent-cancel" in js_results:  # HTTP+JSON: absent is non-blocking
        assert absent["status"]["state"] in ("submitted", "working")
        assert result(js_results, "send-absent-cancel")["status"]["state"] == "canceled"
    else:
        assert absent["status"]["state"] == "completed"


def test_js_streams_end_on_a_final_update(js_results: Results) -> None:
    for scenario, state in (("stream", "completed"), ("stream-ask", "input-required")):
        last = result(js_results, scenario)[-1]
        assert last["kind"] == "status-update" and last["final"] is True, scenario
        assert last["status"]["state"] == state


def test_js_multi_turn_get_and_cancel(js_results: Results) -> None:
    asked = result(js_results, "ask")
    assert asked["status"]["state"] == "input-required"
    answered = result(js_results, "answer")
    assert answered["id"] == asked["id"] and answered["status"]["state"] == "completed"
    assert result(js_results, "get")["status"]["state"] == "completed"
    held = result(js_results, "send-nonblocking")
    assert held["status"]["state"] in ("submitted", "working")
    assert result(js_results, "cancel")["status"]["state"] == "canceled"


def test_js_push_config_crud(js_results: Results) -> None:
    """The JS REST client POSTs a bare TaskPushNotificationConfig (with a ``name``)."""
    task_id = result(js_results, "send")["id"]
    created = result(js_results, "push-set")
    assert created["taskId"] == task_id
    assert created["pushNotificationConfig"] == {"id": "js-1", "url": "https://example.com/hook"}
    assert result(js_results, "push-get") == created
    assert result(js_results, "push-list") == [created]
    assert result(js_results, "push-delete") == {"deleted": True}


def test_js_unknown_task(js_results: Results) -> None:
    assert js_results["missing-task"]["error"]["type"].startswith("TaskNotFound")
