"""ListTasks (filters, order, paging, tokens), caller scoping, and push-config CRUD."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from a2a_gateway.protocol import errors
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.task_store import TaskStore
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import ALICE, BOB, ctx, request, send, state_name


async def list_tasks(engine: TaskEngine, **fields: object) -> pb.ListTasksResponse:
    return await engine.list_tasks(pb.ListTasksRequest(**fields), ctx())  # type: ignore[arg-type]


async def test_newest_first_with_totals_and_all_four_fields(engine: TaskEngine) -> None:
    made = [await send(engine, f"hi {i}") for i in range(5)]
    listed = await list_tasks(engine)
    # Newest status first; tasks finished in the same millisecond by id, descending.
    newest_first = sorted(
        made,
        key=lambda t: (t.status.timestamp.seconds, t.status.timestamp.nanos, t.id),
        reverse=True,
    )
    assert [t.id for t in listed.tasks] == [t.id for t in newest_first]
    assert listed.total_size == 5
    assert listed.page_size == 5
    assert listed.next_page_token == ""
    assert all(not t.artifacts for t in listed.tasks)  # artifacts only when asked
    with_artifacts = await list_tasks(engine, include_artifacts=True)
    assert all(t.artifacts for t in with_artifacts.tasks)


async def test_paging_walks_every_task_once(engine: TaskEngine) -> None:
    made = {(await send(engine, f"hi {i}")).id for i in range(7)}
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await list_tasks(engine, page_size=3, page_token=token)
        pages += 1
        assert page.total_size == 7
        assert page.page_size == len(page.tasks)
        seen.extend(t.id for t in page.tasks)
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    assert sorted(seen) == sorted(made) and len(seen) == 7


async def test_filters(engine: TaskEngine) -> None:
    a1 = await send(engine, "hi", context_id="ctx-a")
    asked = await send(engine, "ask:Q?", context_id="ctx-a")
    b1 = await send(engine, "hi", context_id="ctx-b")
    assert {t.id for t in (await list_tasks(engine, context_id="ctx-a")).tasks} == {
        a1.id,
        asked.id,
    }
    waiting = await list_tasks(engine, status=pb.TASK_STATE_INPUT_REQUIRED)
    assert [t.id for t in waiting.tasks] == [asked.id]
    both = await list_tasks(engine, context_id="ctx-a", status=pb.TASK_STATE_COMPLETED)
    assert [t.id for t in both.tasks] == [a1.id]
    after = pb.ListTasksRequest()
    after.status_timestamp_after.CopyFrom(b1.status.timestamp)
    recent = await engine.list_tasks(after, ctx())
    assert b1.id in {t.id for t in recent.tasks}  # >= the timestamp
    assert all(
        (t.status.timestamp.seconds, t.status.timestamp.nanos)
        >= (b1.status.timestamp.seconds, b1.status.timestamp.nanos)
        for t in recent.tasks
    )


async def test_history_length_per_task(engine: TaskEngine) -> None:
    asked = await send(engine, "ask:Q?")
    await send(engine, "A", task_id=asked.id)
    assert len((await list_tasks(engine)).tasks[0].history) == 3
    assert len((await list_tasks(engine, history_length=0)).tasks[0].history) == 0
    assert len((await list_tasks(engine, history_length=1)).tasks[0].history) == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"page_size": 0}, "pageSize"),
        ({"page_size": 101}, "pageSize"),
        ({"page_size": -5}, "pageSize"),
        ({"history_length": -1}, "historyLength"),
        ({"status": 99}, "status"),
        ({"page_token": "not-a-token"}, "pageToken"),
        ({"page_token": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, "pageToken"),
    ],
)
async def test_invalid_list_requests(
    engine: TaskEngine, fields: dict[str, object], field: str
) -> None:
    with pytest.raises(errors.InvalidParamsError) as caught:
        await list_tasks(engine, **fields)
    assert caught.value.violations[0].field == field


async def test_page_tokens_are_bound_to_their_query_and_engine(
    engine: TaskEngine, new_engine: Callable[..., TaskEngine], store: TaskStore
) -> None:
    for i in range(3):
        await send(engine, f"hi {i}", context_id="ctx-a")
    token = (await list_tasks(engine, page_size=1, context_id="ctx-a")).next_page_token
    assert token
    with pytest.raises(errors.InvalidParamsError):  # another query
        await list_tasks(engine, page_size=1, context_id="ctx-b", page_token=token)
    with pytest.raises(errors.InvalidParamsError):  # another caller
        await engine.list_tasks(pb.ListTasksRequest(context_id="ctx-a", page_token=token), ctx(BOB))
    other = new_engine()  # another engine (a restart, or another process on the store)
    if store.page_token_key() is None:
        with pytest.raises(errors.InvalidParamsError):  # stale: its own key
            await list_tasks(other, context_id="ctx-a", page_token=token)
    else:  # a shared store's key: every process reads every other's tokens
        assert len((await list_tasks(other, context_id="ctx-a", page_token=token)).tasks) == 2
    forged = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    with pytest.raises(errors.InvalidParamsError):
        await list_tasks(engine, context_id="ctx-a", page_token=forged)
    page = await list_tasks(engine, page_size=5, context_id="ctx-a", page_token=token)
    assert len(page.tasks) == 2  # another page size is fine


async def test_live_tasks_are_listed(engine: TaskEngine) -> None:
    held = await send(engine, "hold:30", return_immediately=True)
    listed = await list_tasks(engine)
    assert [t.id for t in listed.tasks] == [held.id]
    assert state_name(listed.tasks[0]) in {"SUBMITTED", "WORKING"}
    await engine.cancel_task(pb.CancelTaskRequest(id=held.id), ctx())


async def test_tasks_are_invisible_to_other_callers(engine: TaskEngine) -> None:
    mine = await send(engine, "ask:Q?")
    same_name_other_workspace = ALICE.__class__(name="alice", workspace="/ws/two")
    for other in (BOB, same_name_other_workspace):
        assert (await engine.list_tasks(pb.ListTasksRequest(), ctx(other))).total_size == 0
        with pytest.raises(errors.TaskNotFoundError):
            await engine.get_task(pb.GetTaskRequest(id=mine.id), ctx(other))
        with pytest.raises(errors.TaskNotFoundError):
            await engine.send_message(request("A", task_id=mine.id), ctx(other))
    bobs = await send(engine, "hi", BOB)
    assert [t.id for t in (await engine.list_tasks(pb.ListTasksRequest(), ctx(BOB))).tasks] == [
        bobs.id
    ]


# --- push notification configs -----------------------------------------------------------


def push_config(
    task_id: str, config_id: str = "", **fields: object
) -> pb.TaskPushNotificationConfig:
    config = pb.TaskPushNotificationConfig(
        task_id=task_id,
        id=config_id,
        url="https://hooks.example/a2a",
        **fields,  # type: ignore[arg-type]
    )
    return config


async def test_push_operations_refused_when_disabled(engine: TaskEngine) -> None:
    task = await send(engine, "hi")
    calls = [
        engine.create_task_push_notification_config(push_config(task.id), ctx()),
        engine.get_task_push_notification_config(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="x"), ctx()
        ),
        engine.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id), ctx()
        ),
        engine.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="x"), ctx()
        ),
    ]
    for call in calls:
        with pytest.raises(errors.PushNotificationNotSupportedError):
            await call
    inline = request("hi")
    inline.configuration.task_push_notification_config.url = "https://hooks.example/a2a"
    with pytest.raises(errors.PushNotificationNotSupportedError):
        await engine.send_message(inline, ctx())


async def test_push_config_crud_never_returns_secrets(
    new_engine: Callable[..., TaskEngine], store: TaskStore
) -> None:
    engine = new_engine(push_enabled=True)
    task = await send(engine, "ask:Q?")
    created = await engine.create_task_push_notification_config(
        push_config(
            task.id,
            token="tok-secret-1",
            authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="cred-secret"),
        ),
        ctx(),
    )
    assert created.id and created.task_id == task.id
    assert created.url == "https://hooks.example/a2a"
    assert not created.token and not created.authentication.credentials
    assert created.authentication.scheme == "Bearer"
    got = await engine.get_task_push_notification_config(
        pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id=created.id), ctx()
    )
    assert got == created
    # Stored with the task, secrets included (the webhook needs them later).
    record = await store.load(ALICE, task.id)
    assert record is not None
    assert [(c.id, c.token) for c in record.push_configs] == [(created.id, "tok-secret-1")]
    # Upsert by id, then list.
    await engine.create_task_push_notification_config(push_config(task.id, created.id), ctx())
    await engine.create_task_push_notification_config(push_config(task.id, "second"), ctx())
    listed = await engine.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id), ctx()
    )
    assert [c.id for c in listed.configs] == [created.id, "second"]
    assert listed.next_page_token == ""
    first_page = await engine.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id, page_size=1), ctx()
    )
    assert [c.id for c in first_page.configs] == [created.id]
    second_page = await engine.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(
            task_id=task.id, page_size=1, page_token=first_page.next_page_token
        ),
        ctx(),
    )
    assert [c.id for c in second_page.configs] == ["second"]
    # Delete is idempotent; a missing config is TaskNotFound.
    for _ in range(2):
        await engine.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="second"), ctx()
        )
    with pytest.raises(errors.TaskNotFoundError):
        await engine.get_task_push_notification_config(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="second"), ctx()
        )


async def test_push_config_rules(new_engine: Callable[..., TaskEngine]) -> None:
    engine = new_engine(push_enabled=True)
    task = await send(engine, "hi")
    with pytest.raises(errors.TaskNotFoundError):
        await engine.create_task_push_notification_config(push_config("missing"), ctx())
    with pytest.raises(errors.TaskNotFoundError):
        await engine.create_task_push_notification_config(push_config(task.id), ctx(BOB))
    with pytest.raises(errors.TaskNotFoundError):
        await engine.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id), ctx(BOB)
        )
    with pytest.raises(errors.TaskNotFoundError):
        await engine.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id="missing", id="x"), ctx()
        )
    bad_url = push_config(task.id)
    bad_url.url = "ftp://example.com"
    with pytest.raises(errors.InvalidParamsError, match="url"):
        await engine.create_task_push_notification_config(bad_url, ctx())
    for i in range(10):
        await engine.create_task_push_notification_config(push_config(task.id, f"c{i}"), ctx())
    with pytest.raises(errors.InvalidParamsError, match="at most 10"):
        await engine.create_task_push_notification_config(push_config(task.id, "c10"), ctx())


async def test_inline_push_config_is_stored_with_a_new_task(
    new_engine: Callable[..., TaskEngine], store: TaskStore
) -> None:
    engine = new_engine(push_enabled=True)
    req = request("hi")
    req.configuration.task_push_notification_config.url = "https://hooks.example/a2a"
    req.configuration.task_push_notification_config.token = "tok"
    task = (await engine.send_message(req, ctx())).task
    record = await store.load(ALICE, task.id)
    assert record is not None
    assert [(c.task_id, c.token) for c in record.push_configs] == [(task.id, "tok")]
    assert record.push_configs[0].id


async def test_push_config_on_a_live_task_is_kept_by_the_run(
    new_engine: Callable[..., TaskEngine], store: TaskStore
) -> None:
    engine = new_engine(push_enabled=True)
    held = await send(engine, "hold:30", return_immediately=True)
    await engine.create_task_push_notification_config(push_config(held.id, "live"), ctx())
    await engine.cancel_task(pb.CancelTaskRequest(id=held.id), ctx())
    await asyncio.sleep(0)
    record = await store.load(ALICE, held.id)
    assert record is not None
    assert state_name(record.task) == "CANCELED"
    assert [c.id for c in record.push_configs] == ["live"]


async def test_a_page_over_the_byte_budget_is_split(
    new_engine: Callable[..., TaskEngine],
) -> None:
    engine = new_engine(list_max_bytes=250_000)
    made = [await send(engine, "x" * 100_000 + f" {i}") for i in range(5)]
    seen: list[str] = []
    token = ""
    sizes = []
    while True:
        page = await list_tasks(engine, page_size=100, page_token=token, include_artifacts=True)
        assert page.total_size == 5
        assert page.page_size == len(page.tasks) >= 1
        assert sum(t.ByteSize() for t in page.tasks) <= 250_000 or len(page.tasks) == 1
        sizes.append(len(page.tasks))
        seen.extend(t.id for t in page.tasks)
        token = page.next_page_token
        if not token:
            break
    assert sizes[0] < 5  # fewer tasks than asked, with a token for the rest
    assert sorted(seen) == sorted(t.id for t in made) and len(seen) == 5
    # A single task larger than the budget is still answered, alone.
    alone = new_engine(list_max_bytes=1000)
    await send(alone, "y" * 5000)
    first = await list_tasks(alone, include_artifacts=True)
    assert len(first.tasks) == 1


async def test_a_message_id_over_the_limit_is_invalid_params(engine: TaskEngine) -> None:
    with pytest.raises(errors.InvalidParamsError) as caught:
        await send(engine, "hi", message_id="m" * 257)
    assert caught.value.violations[0].field == "message.messageId"
    assert "256" in caught.value.violations[0].description
    assert (await list_tasks(engine)).total_size == 0  # nothing stored
    await send(engine, "hi", message_id="m" * 256)  # the limit itself is fine


async def test_a_bad_push_config_page_is_invalid_before_the_task_is_looked_up(
    new_engine: Callable[..., TaskEngine],
) -> None:
    engine = new_engine(push_enabled=True)
    for page_size in (-1, 101):
        with pytest.raises(errors.InvalidParamsError, match="pageSize"):
            await engine.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(
                    task_id="no-such-task", page_size=page_size
                ),
                ctx(),
            )
