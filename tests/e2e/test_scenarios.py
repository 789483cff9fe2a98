"""One scenario table, run against JSON-RPC, HTTP+JSON and gRPC: same inputs, same outcomes.

Functional equivalence of bindings is a requirement of the spec; every row below runs on
all three (the ``driver`` fixture is parametrized over them).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.support.secrets import use_secret

from .conftest import KEY_BOB, Driver, WireError

COMPLETED = "TASK_STATE_COMPLETED"


def send(text: str, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "ROLE_USER",
        "messageId": str(uuid.uuid4()),
        "parts": [{"text": text}],
    }
    message.update(extra.pop("message", {}))
    return {"message": message, **extra}


def artifact_text(task: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])


async def expect_error(reason: str, coro: Any) -> WireError:
    with pytest.raises(WireError) as caught:
        await coro
    assert caught.value.reason == reason, caught.value
    return caught.value


async def test_send_completes_with_echo_artifact(driver: Driver) -> None:
    result = await driver.call("SendMessage", send("hello"))
    task = result["task"]
    assert task["status"]["state"] == COMPLETED
    assert task["status"]["timestamp"].endswith("Z")
    assert artifact_text(task) == "hello"
    assert [a["name"] for a in task["artifacts"]] == ["response"]
    got = await driver.call("GetTask", {"id": task["id"]})
    assert got["id"] == task["id"] and got["contextId"] == task["contextId"]


async def test_message_reply_has_no_task(driver: Driver) -> None:
    result = await driver.call("SendMessage", send("message:hi there"))
    assert set(result) == {"message"}
    assert result["message"]["role"] == "ROLE_AGENT"
    assert result["message"]["parts"][0]["text"] == "hi there"


async def test_unknown_task_is_task_not_found_everywhere(driver: Driver) -> None:
    missing = str(uuid.uuid4())
    await expect_error("TASK_NOT_FOUND", driver.call("GetTask", {"id": missing}))
    await expect_error("TASK_NOT_FOUND", driver.call("CancelTask", {"id": missing}))
    await expect_error("TASK_NOT_FOUND", driver.stream("SubscribeToTask", {"id": missing}))
    await expect_error(
        "TASK_NOT_FOUND",
        driver.call("SendMessage", send("x", message={"taskId": missing})),
    )


async def test_another_callers_task_is_not_found(driver: Driver) -> None:
    task = (await driver.call("SendMessage", send("mine")))["task"]
    driver.key = KEY_BOB
    await expect_error("TASK_NOT_FOUND", driver.call("GetTask", {"id": task["id"]}))
    await expect_error("TASK_NOT_FOUND", driver.call("CancelTask", {"id": task["id"]}))
    listed = await driver.call("ListTasks", {})
    assert listed["tasks"] == [] and listed["totalSize"] == 0  # bob has none of his own


async def test_cancel_terminal_is_not_cancelable(driver: Driver) -> None:
    task = (await driver.call("SendMessage", send("done")))["task"]
    await expect_error("TASK_NOT_CANCELABLE", driver.call("CancelTask", {"id": task["id"]}))


async def test_return_immediately_then_cancel(driver: Driver) -> None:
    result = await driver.call(
        "SendMessage", send("hold:30", configuration={"returnImmediately": True})
    )
    task = result["task"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    canceled = await driver.call("CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    got = await driver.call("GetTask", {"id": task["id"]})
    assert got["status"]["state"] == "TASK_STATE_CANCELED"


async def test_stream_task_first_then_chunks_then_completed(driver: Driver) -> None:
    events = await driver.stream("SendStreamingMessage", send("chunks:3"))
    assert "task" in events[0]
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["chunk-0", "chunk-1", "chunk-2"]
    assert [bool(c.get("append")) for c in chunks] == [False, True, True]
    assert [bool(c.get("lastChunk")) for c in chunks] == [False, False, True]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED


async def test_stream_message_reply_is_one_event(driver: Driver) -> None:
    events = await driver.stream("SendStreamingMessage", send("message:one"))
    assert len(events) == 1 and "message" in events[0]


async def test_subscribe_snapshot_first_then_live_until_canceled(driver: Driver) -> None:
    task = (
        await driver.call("SendMessage", send("hold:30", configuration={"returnImmediately": True}))
    )["task"]
    events: list[dict[str, Any]] = []
    first_event = asyncio.Event()

    async def follow() -> None:
        async for event in driver.open_stream("SubscribeToTask", {"id": task["id"]}):
            events.append(event)
            first_event.set()

    follower = asyncio.create_task(follow())
    async with asyncio.timeout(10):
        await first_event.wait()
        await driver.call("CancelTask", {"id": task["id"]})
        await follower
    assert events[0]["task"]["id"] == task["id"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_subscribe_to_terminal_is_unsupported(driver: Driver) -> None:
    task = (await driver.call("SendMessage", send("done")))["task"]
    await expect_error(
        "UNSUPPORTED_OPERATION", driver.stream("SubscribeToTask", {"id": task["id"]})
    )


async def test_send_to_terminal_task_is_unsupported(driver: Driver) -> None:
    task = (await driver.call("SendMessage", send("done")))["task"]
    await expect_error(
        "UNSUPPORTED_OPERATION",
        driver.call("SendMessage", send("again", message={"taskId": task["id"]})),
    )


async def test_multi_turn_ask_then_answer(driver: Driver) -> None:
    first = (await driver.call("SendMessage", send("ask:What city?")))["task"]
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert first["status"]["message"]["parts"][0]["text"] == "What city?"
    second = (await driver.call("SendMessage", send("Paris", message={"taskId": first["id"]})))[
        "task"
    ]
    assert second["id"] == first["id"] and second["contextId"] == first["contextId"]
    assert second["status"]["state"] == COMPLETED
    assert "Paris" in artifact_text(second)


async def test_continuation_with_other_context_is_invalid(driver: Driver) -> None:
    first = (await driver.call("SendMessage", send("ask:Q?")))["task"]
    await expect_error(
        "INVALID_PARAMS",
        driver.call(
            "SendMessage", send("A", message={"taskId": first["id"], "contextId": "other"})
        ),
    )


@pytest.mark.parametrize("context_id", ["has space", "x" * 101, "semi;colon"])
async def test_bad_context_id_is_invalid_params(driver: Driver, context_id: str) -> None:
    await expect_error(
        "INVALID_PARAMS", driver.call("SendMessage", send("x", message={"contextId": context_id}))
    )


async def test_context_busy(driver: Driver) -> None:
    context = f"ctx-{uuid.uuid4().hex[:8]}"
    first = await driver.call(
        "SendMessage",
        send("hold:30", message={"contextId": context}, configuration={"returnImmediately": True}),
    )
    err = await expect_error(
        "UNSUPPORTED_OPERATION",
        driver.call("SendMessage", send("x", message={"contextId": context})),
    )
    assert "busy" in err.message
    await driver.call("CancelTask", {"id": first["task"]["id"]})


async def test_retried_message_id_returns_the_same_task(driver: Driver) -> None:
    request = send("once")
    first = (await driver.call("SendMessage", request))["task"]
    second = (await driver.call("SendMessage", request))["task"]
    assert first["id"] == second["id"]


@pytest.mark.parametrize(
    ("changes", "retry"),
    [
        ({}, True),
        ({"metadata": {"note": "second try"}}, True),
        ({"message": {"parts": [{"text": "something else"}]}}, False),
        ({"message": {"contextId": "another-context"}}, False),
    ],
)
async def test_a_reused_message_id_is_a_retry_only_for_the_same_message(
    driver: Driver, changes: dict[str, Any], retry: bool
) -> None:
    message_id = str(uuid.uuid4())
    first = await driver.call("SendMessage", send("once", message={"messageId": message_id}))
    again = send("once", message={"messageId": message_id, **changes.get("message", {})})
    if "metadata" in changes:
        again["metadata"] = changes["metadata"]
    second = (await driver.call("SendMessage", again))["task"]
    assert (second["id"] == first["task"]["id"]) is retry
    if not retry:
        assert second["status"]["state"] == COMPLETED
        context = changes["message"].get("contextId")
        if context:
            assert second["contextId"] == context


async def test_a_reused_message_id_with_a_task_id_continues_that_task(driver: Driver) -> None:
    message_id = str(uuid.uuid4())
    asked = await driver.call(
        "SendMessage", send("ask:Which city?", message={"messageId": message_id})
    )
    task = asked["task"]
    answer = send("Lisbon", message={"messageId": message_id, "taskId": task["id"]})
    answered = (await driver.call("SendMessage", answer))["task"]
    assert answered["id"] == task["id"]
    assert answered["status"]["state"] == COMPLETED


@pytest.mark.parametrize(
    ("metadata", "message_metadata"),
    [
        ({"a2a-gateway.hops": 4}, None),
        ({"volcanic.hops": 4}, None),
        (None, {"volcanic.hops": 4}),
        ({"a2a-gateway.hops": 0, "volcanic.hops": 4}, None),
        ({"volcanic.hops": 1}, {"a2a-gateway.hops": 4}),
    ],
)
async def test_hop_guard_fails_the_task(
    driver: Driver, metadata: dict[str, Any] | None, message_metadata: dict[str, Any] | None
) -> None:
    request = send("x", metadata=metadata) if metadata else send("x")
    if message_metadata:
        request["message"]["metadata"] = message_metadata
    task = (await driver.call("SendMessage", request))["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"


@pytest.mark.server_fault
async def test_failures_and_rejections(driver: Driver) -> None:
    failed = (await driver.call("SendMessage", send("fail:nope")))["task"]
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    rejected = (await driver.call("SendMessage", send("reject:no thanks")))["task"]
    assert rejected["status"]["state"] == "TASK_STATE_REJECTED"
    auth = (await driver.call("SendMessage", send("auth:need creds")))["task"]
    assert auth["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    crashed = (await driver.call("SendMessage", send("crash")))["task"]
    assert crashed["status"]["state"] == "TASK_STATE_FAILED"
    text = crashed["status"]["message"]["parts"][0]["text"]
    assert text == "The run failed unexpectedly."


async def test_history_length(driver: Driver) -> None:
    task = (await driver.call("SendMessage", send("hist")))["task"]
    none = await driver.call("GetTask", {"id": task["id"], "historyLength": 0})
    assert "history" not in none
    one = await driver.call("GetTask", {"id": task["id"], "historyLength": 1})
    assert len(one["history"]) == 1


async def test_list_tasks_paging_and_filters(driver: Driver) -> None:
    context = f"list-{uuid.uuid4().hex[:8]}"
    ids = [
        (await driver.call("SendMessage", send(f"n{i}", message={"contextId": context})))["task"][
            "id"
        ]
        for i in range(3)
    ]
    page = await driver.call("ListTasks", {"contextId": context, "pageSize": 2})
    assert page["pageSize"] == 2 and page["totalSize"] == 3
    assert [t["id"] for t in page["tasks"]] == ids[::-1][:2]
    assert "artifacts" not in page["tasks"][0]
    assert page["nextPageToken"]
    rest = await driver.call(
        "ListTasks", {"contextId": context, "pageSize": 2, "pageToken": page["nextPageToken"]}
    )
    assert [t["id"] for t in rest["tasks"]] == [ids[0]]
    assert rest["nextPageToken"] == ""
    with_artifacts = await driver.call(
        "ListTasks", {"contextId": context, "includeArtifacts": True}
    )
    assert artifact_text(with_artifacts["tasks"][0]) == "n2"
    by_state = await driver.call(
        "ListTasks", {"contextId": context, "status": "TASK_STATE_WORKING"}
    )
    assert by_state["tasks"] == []
    assert by_state["totalSize"] == 0
    assert by_state["nextPageToken"] == ""


@pytest.mark.parametrize("page_size", [0, 101, -1])
async def test_list_page_size_out_of_range(driver: Driver, page_size: int) -> None:
    await expect_error("INVALID_PARAMS", driver.call("ListTasks", {"pageSize": page_size}))


async def test_list_forged_page_token(driver: Driver) -> None:
    await expect_error("INVALID_PARAMS", driver.call("ListTasks", {"pageToken": "forged!"}))


async def test_missing_required_field_is_invalid_params(driver: Driver) -> None:
    err = await expect_error(
        "INVALID_PARAMS",
        driver.call(
            "SendMessage", {"message": {"role": "ROLE_USER", "messageId": "m", "parts": []}}
        ),
    )
    assert "parts" in err.message


async def test_push_config_crud(driver: Driver) -> None:
    # Registration only (the task is finished, so nothing is delivered); delivery is in
    # test_push_e2e.py. Without allow_private_urls a webhook must be https and public.
    use_secret("scenario-token-1")
    task = (await driver.call("SendMessage", send("push")))["task"]
    hook = "https://example.invalid/hook"
    config = {"taskId": task["id"], "id": "c1", "url": hook, "token": "scenario-token-1"}
    created = await driver.call("CreateTaskPushNotificationConfig", config)
    assert created == {"taskId": task["id"], "id": "c1", "url": hook}  # no token back
    got = await driver.call("GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1"})
    assert got == created
    listed = await driver.call("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    assert listed["configs"] == [created]
    for _ in range(2):  # delete is idempotent
        deleted = await driver.call(
            "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1"}
        )
        assert deleted == {}
    await expect_error(
        "TASK_NOT_FOUND",
        driver.call("GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1"}),
    )
    for url in ("http://example.com/hook", "https://127.0.0.1/hook"):
        err = await expect_error(
            "INVALID_PARAMS",
            driver.call("CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": url}),
        )
        assert "url" in err.message


async def test_extended_card_for_an_authenticated_caller(driver: Driver) -> None:
    card = await driver.call("GetExtendedAgentCard", {})
    assert card["name"] and card["supportedInterfaces"]


async def test_unsupported_version(driver: Driver) -> None:
    driver.version = "2.0"
    await expect_error("VERSION_NOT_SUPPORTED", driver.call("GetTask", {"id": "x"}))


async def test_missing_version_is_served_as_1_0(driver: Driver) -> None:
    driver.version = None
    result = await driver.call("SendMessage", send("no header"))
    assert result["task"]["status"]["state"] == COMPLETED


async def test_bad_key_is_unauthenticated(driver: Driver) -> None:
    driver.key = "wrong-key-123456"
    await expect_error("UNAUTHENTICATED", driver.call("GetTask", {"id": "x"}))
    driver.key = ""
    await expect_error("UNAUTHENTICATED", driver.call("ListTasks", {}))


async def test_tenant_form(driver: Driver) -> None:
    result = await driver.call("SendMessage", {**send("tenant hi"), "tenant": "acme"})
    assert result["task"]["status"]["state"] == COMPLETED


async def test_list_filters_by_status_and_timestamp(driver: Driver) -> None:
    context = f"ts-{uuid.uuid4().hex[:8]}"
    first = (await driver.call("SendMessage", send("a", message={"contextId": context})))["task"]
    waiting = (
        await driver.call("SendMessage", send("ask:Q?", message={"contextId": f"{context}-b"}))
    )["task"]
    after = first["status"]["timestamp"]
    newer = await driver.call("ListTasks", {"statusTimestampAfter": after})
    ids = [t["id"] for t in newer["tasks"]]
    assert waiting["id"] in ids and first["id"] in ids  # ">=" the timestamp
    only_waiting = await driver.call("ListTasks", {"status": "TASK_STATE_INPUT_REQUIRED"})
    assert [t["id"] for t in only_waiting["tasks"]] == [waiting["id"]]
    assert only_waiting["totalSize"] == 1


async def test_list_invalid_status_enum_is_invalid_params(driver: Driver) -> None:
    await expect_error("INVALID_PARAMS", driver.call("ListTasks", {"status": 99}))


async def test_list_history_length_applies_per_task(driver: Driver) -> None:
    context = f"h-{uuid.uuid4().hex[:8]}"
    await driver.call("SendMessage", send("x", message={"contextId": context}))
    listed = await driver.call("ListTasks", {"contextId": context, "historyLength": 0})
    assert "history" not in listed["tasks"][0]
    full = await driver.call("ListTasks", {"contextId": context})
    assert len(full["tasks"][0]["history"]) == 1


async def test_negative_history_length_is_invalid_params(driver: Driver) -> None:
    task = (await driver.call("SendMessage", send("neg")))["task"]
    await expect_error(
        "INVALID_PARAMS", driver.call("GetTask", {"id": task["id"], "historyLength": -1})
    )


async def test_each_run_replaces_the_response_artifact(driver: Driver) -> None:
    first = (await driver.call("SendMessage", send("ask:Name?")))["task"]
    done = (await driver.call("SendMessage", send("Ada", message={"taskId": first["id"]})))["task"]
    names = [a.get("name") for a in done["artifacts"]]
    assert names.count("response") == 1
    assert "Ada" in artifact_text(done)
    history = await driver.call("GetTask", {"id": done["id"]})
    texts = [m["parts"][0].get("text") for m in history["history"]]
    assert "ask:Name?" in texts and "Ada" in texts


async def test_continuing_a_working_task_is_unsupported(driver: Driver) -> None:
    task = (
        await driver.call("SendMessage", send("hold:30", configuration={"returnImmediately": True}))
    )["task"]
    await expect_error(
        "UNSUPPORTED_OPERATION",
        driver.call("SendMessage", send("more", message={"taskId": task["id"]})),
    )
    await driver.call("CancelTask", {"id": task["id"]})


async def test_hop_metadata_on_the_message_counts_too(driver: Driver) -> None:
    message = {"metadata": {"a2a-gateway.hops": 9}}
    task = (await driver.call("SendMessage", send("x", message=message)))["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    allowed = (await driver.call("SendMessage", send("y", metadata={"a2a-gateway.hops": 3})))[
        "task"
    ]
    assert allowed["status"]["state"] == COMPLETED


async def test_blocking_send_returns_at_input_required_and_auth_required(driver: Driver) -> None:
    asked = (await driver.call("SendMessage", send("ask:Sure?")))["task"]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    auth = (await driver.call("SendMessage", send("auth:sign in")))["task"]
    assert auth["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert auth["status"]["message"]["parts"][0]["text"] == "sign in"


async def test_stream_closes_at_input_required(driver: Driver) -> None:
    events = await driver.stream("SendStreamingMessage", send("ask:Which one?"))
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_two_subscribers_see_the_same_events(driver: Driver) -> None:
    task = (
        await driver.call("SendMessage", send("hold:30", configuration={"returnImmediately": True}))
    )["task"]
    # Both subscribers start from a WORKING snapshot: on two gateways, one that does not
    # run the task answers from the database, where its WORKING is written lazily (from
    # a SUBMITTED snapshot that stream would rightly get WORKING as its first event).
    async with asyncio.timeout(10):
        while True:
            got = [await driver.call("GetTask", {"id": task["id"]}) for _ in range(2)]
            if all(t["status"]["state"] == "TASK_STATE_WORKING" for t in got):
                break
            await asyncio.sleep(0.01)
    seen: list[list[dict[str, Any]]] = [[], []]
    started = [asyncio.Event(), asyncio.Event()]

    async def follow(index: int) -> None:
        async for event in driver.open_stream("SubscribeToTask", {"id": task["id"]}):
            seen[index].append(event)
            started[index].set()

    followers = [asyncio.create_task(follow(i)) for i in range(2)]
    async with asyncio.timeout(10):
        await started[0].wait()
        await started[1].wait()
        await driver.call("CancelTask", {"id": task["id"]})
        await asyncio.gather(*followers)
    assert [list(e) for e in seen[0]] == [list(e) for e in seen[1]]
    assert seen[0][-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
