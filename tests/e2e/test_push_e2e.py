"""Push notifications end to end, on every binding: a real gateway (outbound guard
relaxed for 127.0.0.1) delivers to a real webhook receiver.

Deliveries come once per status change (not per chunk), in order, with the token and
Authorization headers; a 500 is retried until it succeeds, a 404 is not retried; the
token and credentials never come back in a response, never reach a task file in
plaintext, and never reach a log.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.serve import Gateway
from tests.support.secrets import use_secret

from ..conftest import captured_logs
from .conftest import BINDINGS, Driver, WireError
from .outbound_support import (
    Receiver,
    private_gateway,
    settle,
    webhook_receiver,
    wire_driver,
    workspace_with_callers,
)

TOKEN = "push-e2e-token-5b9d2f7a1c"
CREDENTIALS = "push-e2e-credentials-8e3a6c0f4d"
use_secret(TOKEN, CREDENTIALS)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with private_gateway(workspace_with_callers(tmp_path)) as started:
        yield started


@pytest.fixture(params=BINDINGS)
async def driver(request: pytest.FixtureRequest, gateway: Gateway) -> AsyncIterator[Driver]:
    async with wire_driver(request.param, gateway) as made:
        yield made


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with webhook_receiver() as started:
        yield started


def send(text: str, *, task_id: str = "", push: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "ROLE_USER",
        "messageId": str(uuid.uuid4()),
        "parts": [{"text": text}],
    }
    if task_id:
        message["taskId"] = task_id
    request: dict[str, Any] = {"message": message}
    if push is not None:
        request["configuration"] = {"taskPushNotificationConfig": push}
    return request


def secret_config(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "url": url,
        "token": TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS},
        **extra,
    }


async def ask(driver: Driver, push: dict[str, Any] | None = None) -> dict[str, Any]:
    """A task waiting for input (INPUT_REQUIRED)."""
    task: dict[str, Any] = (await driver.call("SendMessage", send("ask:Name?", push=push)))["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


async def test_every_status_change_in_order_with_token_and_authorization(
    driver: Driver, gateway: Gateway, receiver: Receiver
) -> None:
    task = await ask(driver, push=secret_config(receiver.url("/hook?sig=abc")))
    # The answer runs the chunks directive: three text chunks, no notification each.
    answer = send("chunks:3", task_id=task["id"])
    done = (await driver.call("SendMessage", answer))["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    hits = await receiver.wait_for("/hook", 4)
    await settle(gateway)
    assert [hit.state for hit in receiver.on("/hook")] == [
        "WORKING",
        "INPUT_REQUIRED",
        "WORKING",
        "COMPLETED",
    ]
    for hit in hits:
        assert hit.query == "sig=abc"
        assert hit.headers["Content-Type"] == "application/a2a+json"
        assert hit.headers["X-A2A-Notification-Token"] == TOKEN
        assert hit.headers["Authorization"] == f"Bearer {CREDENTIALS}"
        assert set(hit.body) == {"task"}  # a StreamResponse holding the whole task
        assert hit.body["task"]["id"] == task["id"]
    final = hits[-1].body["task"]
    assert [p["text"] for a in final["artifacts"] for p in a["parts"]] == ["chunk-0chunk-1chunk-2"]
    assert final["status"]["timestamp"].endswith("Z")


async def test_retries_a_500_until_delivered_and_never_retries_a_404(
    driver: Driver, gateway: Gateway, receiver: Receiver
) -> None:
    task = await ask(driver)
    receiver.statuses = {"/flaky": [500, 500], "/gone": [404]}
    for config_id, path in (("flaky", "/flaky"), ("gone", "/gone")):
        config = {"taskId": task["id"], "id": config_id, "url": receiver.url(path)}
        await driver.call("CreateTaskPushNotificationConfig", config)
    await driver.call("SendMessage", send("done", task_id=task["id"]))
    await receiver.wait_for("/flaky", 4)
    await receiver.wait_for("/gone", 2)
    await settle(gateway)
    # WORKING failed twice, then got through; COMPLETED waited behind it (one queue).
    assert [hit.state for hit in receiver.on("/flaky")] == [
        "WORKING",
        "WORKING",
        "WORKING",
        "COMPLETED",
    ]
    # The 404 was final for WORKING; COMPLETED is a new notification and is sent.
    assert [hit.state for hit in receiver.on("/gone")] == ["WORKING", "COMPLETED"]


async def test_cancel_and_delete(driver: Driver, gateway: Gateway, receiver: Receiver) -> None:
    task = await ask(driver, push={"url": receiver.url("/kept"), "id": "kept"})
    await driver.call(
        "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "id": "dropped", "url": receiver.url("/dropped")},
    )
    await driver.call("DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "dropped"})
    canceled = await driver.call("CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    await receiver.wait_for("/kept", 3)
    await settle(gateway)
    assert [hit.state for hit in receiver.on("/kept")] == ["WORKING", "INPUT_REQUIRED", "CANCELED"]
    assert receiver.on("/dropped") == []  # deleted before the cancel


async def test_a_task_failed_by_the_hop_guard_is_pushed(
    driver: Driver, gateway: Gateway, receiver: Receiver
) -> None:
    looping = send("hi", push={"url": receiver.url("/hops")})
    looping["metadata"] = {"a2a-gateway.hops": 99}
    task = (await driver.call("SendMessage", looping))["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    await receiver.wait_for("/hops", 1)
    await settle(gateway)
    assert [hit.state for hit in receiver.on("/hops")] == ["FAILED"]


async def test_secrets_never_come_back_nor_rest_in_plaintext(
    driver: Driver, gateway: Gateway, receiver: Receiver, tmp_path: Path
) -> None:
    task = await ask(driver)
    created = await driver.call(
        "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "id": "c1", **secret_config(receiver.url("/secret"))},
    )
    assert created == {
        "taskId": task["id"],
        "id": "c1",
        "url": receiver.url("/secret"),
        "authentication": {"scheme": "Bearer"},
    }
    got = await driver.call("GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1"})
    listed = await driver.call("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    assert got == created and listed["configs"] == [created]
    seen = json.dumps([created, got, listed, await driver.call("GetTask", {"id": task["id"]})])
    assert TOKEN not in seen and CREDENTIALS not in seen

    # At rest: sealed in the task file (the key is in .a2a/secret.key).
    task_file = WorkspaceLayout(tmp_path / "ws").tasks / f"{task['id']}.json"
    stored = json.loads(task_file.read_bytes())["pushConfigs"]
    assert [c["id"] for c in stored] == ["c1"]
    assert stored[0]["token"].startswith("enc:v1:")
    assert stored[0]["authentication"]["credentials"].startswith("enc:v1:")
    for path in (tmp_path / "ws").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert TOKEN.encode() not in data and CREDENTIALS.encode() not in data, path

    # ... yet the webhook gets them: the file store opened the sealed values.
    await driver.call("SendMessage", send("done", task_id=task["id"]))
    hits = await receiver.wait_for("/secret", 2)
    await settle(gateway)
    assert {hit.headers["X-A2A-Notification-Token"] for hit in hits} == {TOKEN}
    assert {hit.headers["Authorization"] for hit in hits} == {f"Bearer {CREDENTIALS}"}
    logs = "\n".join(captured_logs())
    assert TOKEN not in logs and CREDENTIALS not in logs


async def test_webhooks_are_validated(driver: Driver, receiver: Receiver) -> None:
    with pytest.raises(WireError) as refused:
        await driver.call("SendMessage", send("hi", push={"url": "ftp://example.com/hook"}))
    assert refused.value.reason == "INVALID_PARAMS"
    assert "configuration.taskPushNotificationConfig.url" in refused.value.message
    task = await ask(driver)
    for index in range(10):
        config = {"taskId": task["id"], "id": f"c{index}", "url": receiver.url("/many")}
        await driver.call("CreateTaskPushNotificationConfig", config)
    eleventh = {"taskId": task["id"], "id": "c10", "url": receiver.url("/many")}
    with pytest.raises(WireError) as full:
        await driver.call("CreateTaskPushNotificationConfig", eleventh)
    assert full.value.reason == "INVALID_PARAMS"
    assert "at most 10" in full.value.message
    replaced = {"taskId": task["id"], "id": "c3", "url": receiver.url("/other")}
    assert (await driver.call("CreateTaskPushNotificationConfig", replaced))["url"] == (
        receiver.url("/other")
    )
    bad_token = {"taskId": task["id"], "url": receiver.url("/x"), "token": "line\nbreak"}
    with pytest.raises(WireError) as header_unsafe:
        await driver.call("CreateTaskPushNotificationConfig", bad_token)
    assert header_unsafe.value.reason == "INVALID_PARAMS"
    assert "token" in header_unsafe.value.message
