"""Push notifications with two gateway processes on one PostgreSQL database: a task
runs on A, its webhooks are registered on B, and the receiver (a real aiohttp server on
127.0.0.1) gets each status change exactly once, sent by A, the gateway running it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from a2a_gateway.server.pg_local import LocalPostgres
from tests.support.postgres import fresh_database
from tests.support.secrets import use_secret

from .outbound_support import webhook_receiver
from .test_postgres_store import send, two_processes

TOKEN = "pg-push-e2e-token-3f7a1c9d"
use_secret(TOKEN)


async def test_configs_registered_on_b_get_each_status_change_of_a_run_on_a_once(
    tmp_path: Path, postgres: LocalPostgres
) -> None:
    database = await fresh_database(postgres)
    async with (
        webhook_receiver() as receiver,
        two_processes(tmp_path, database, "--allow-private-urls") as (on_a, on_b, _),
    ):
        asked = (await on_a.call("SendMessage", send("ask:Which city?")))["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        task_id = asked["id"]

        def config(name: str) -> dict[str, Any]:
            return {"taskId": task_id, "id": name, "url": receiver.url(f"/{name}"), "token": TOKEN}

        # Registered on B while the task waits; then A runs it again (hold, until cancelled).
        await on_b.call("CreateTaskPushNotificationConfig", config("before"))
        answer = send("hold:60")
        answer["message"]["taskId"] = task_id
        answer["configuration"] = {"returnImmediately": True}
        await on_a.call("SendMessage", answer)
        await receiver.wait_for("/before", 1)  # A's WORKING
        # Registered on B during A's run: A's next status change reaches it.
        await on_b.call("CreateTaskPushNotificationConfig", config("during"))
        for driver in (on_a, on_b):  # both read the rows: the same configs
            listed = await driver.call("ListTaskPushNotificationConfigs", {"taskId": task_id})
            assert [c["id"] for c in listed["configs"]] == ["before", "during"]
        cancelled = await on_b.call("CancelTask", {"id": task_id})
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        await receiver.wait_for("/before", 2)
        await receiver.wait_for("/during", 1)
    # Both gateways stopped (each lets its queued deliveries finish first): nothing more
    # is on its way, so these are all the deliveries there were.
    assert [hit.state for hit in receiver.on("/before")] == ["WORKING", "CANCELED"]
    assert [hit.state for hit in receiver.on("/during")] == ["CANCELED"]
    for hit in receiver.hits:
        assert hit.headers["X-A2A-Notification-Token"] == TOKEN
        assert hit.body["task"]["id"] == task_id
