"""A retry is the same message, not the same id (server/engine/retries.py): a messageId
seen before is answered with the existing task only when the caller, taskId, contextId
and parts are the same too; any other message under a reused id is a new message."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web
import orjson
import pytest

from a2a_gateway.agent.base import Turn
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.protocol import codec
from a2a_gateway.protocol.context import Caller
from a2a_gateway.protocol.errors import TaskNotFoundError
from a2a_gateway.protocol.proto_dict import recent_task_json, to_dict
from a2a_gateway.server.auth import AllowAnonymous
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.engine.retries import message_fingerprint, retry_key
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.http_app import build_http_app
from a2a_gateway.server.task_store import TaskRecord
from lf.a2a.v1 import a2a_pb2 as pb

from .engine_helpers import ALICE, BOB, WAIT_S, collect, ctx, request, send, state_name

FIRST: dict[str, Any] = {"text": "hi", "message_id": "dup", "context_id": "ctx-1"}


def _message(**changes: Any) -> pb.Message:
    fields = {**FIRST, **changes}
    return request(fields.pop("text"), **fields).message


# (what the second message changes, whether it is a retry)
SAME_MESSAGE: list[tuple[dict[str, Any], bool]] = [
    ({}, True),
    ({"message_metadata": {"note": "retried"}}, True),  # metadata is not the message
    ({"metadata": {"a2a-gateway.hops": 1}}, True),  # nor the request's (a proxy adds it)
    ({"return_immediately": True}, True),  # nor the configuration
    ({"text": "hi!"}, False),
    ({"text": "HI"}, False),
    ({"context_id": "ctx-2"}, False),
    ({"context_id": ""}, False),
    ({"task_id": "t-1"}, False),
]


@pytest.mark.parametrize(("changes", "retry"), SAME_MESSAGE)
def test_the_key_is_the_caller_the_id_and_the_message(changes: dict[str, Any], retry: bool) -> None:
    first = retry_key(ALICE, _message())
    assert (retry_key(ALICE, _message(**changes)) == first) is retry
    assert retry_key(BOB, _message(**changes)) != first  # another caller: never a retry


def test_every_part_field_counts() -> None:
    base = pb.Message(message_id="m", parts=[pb.Part(text="a"), pb.Part(raw=b"\x00")])
    variants: list[Callable[[pb.Message], Any]] = [
        lambda m: m.parts[1].__setattr__("raw", b"\x01"),
        lambda m: m.parts[1].__setattr__("filename", "f"),
        lambda m: m.parts[1].__setattr__("media_type", "a/b"),
        lambda m: m.parts[0].metadata.update({"k": 1}),
        lambda m: m.parts.add(text=""),
        lambda m: m.parts.pop(),
        lambda m: m.parts[0].__setattr__("url", "https://x.example/a"),
    ]
    seen = {message_fingerprint(base)}
    for change in variants:
        variant = pb.Message()
        variant.CopyFrom(base)
        change(variant)
        fingerprint = message_fingerprint(variant)
        assert fingerprint not in seen
        seen.add(fingerprint)
    # taskId and contextId cannot be confused with each other or with a part
    assert message_fingerprint(pb.Message(task_id="a")) != message_fingerprint(
        pb.Message(context_id="a")
    )


def test_the_fingerprint_of_a_message_does_not_change() -> None:
    """Keys are stored (task files, the index): a message retried after an upgrade must
    hash as it did when it was first sent."""
    hi = pb.Message(message_id="m", parts=[pb.Part(text="hi")])
    assert message_fingerprint(hi) == "437fe87109eef3a8f5f791b5e1d6e701"
    two = pb.Message(
        message_id="m",
        task_id="t",
        context_id="c",
        parts=[pb.Part(text="a"), pb.Part(raw=b"\0" * 100, filename="f")],
    )
    two.parts[0].metadata.update({"k": 1})
    assert message_fingerprint(two) == "02458f71a9ff18ef3e34c908eb6137ff"


def _send_kwargs(changes: dict[str, Any]) -> dict[str, Any]:
    fields = {**FIRST, **changes}
    return {"text": fields.pop("text"), **fields}


@pytest.mark.parametrize(("changes", "retry"), [c for c in SAME_MESSAGE if "task_id" not in c[0]])
async def test_only_a_true_retry_gets_the_existing_task(
    engine: TaskEngine, changes: dict[str, Any], retry: bool
) -> None:
    first = await send(engine, **_send_kwargs({}))
    second = await send(engine, **_send_kwargs(changes))
    tasks = (await engine.list_tasks(pb.ListTasksRequest(), ctx())).tasks
    if retry:
        assert second.id == first.id
        assert len(tasks) == 1
    else:
        assert second.id != first.id
        assert len(tasks) == 2
        assert state_name(second) == "COMPLETED"
        assert second.history[0].parts[0].text == _send_kwargs(changes)["text"]
        expected_context = _send_kwargs(changes)["context_id"]
        if expected_context:
            assert second.context_id == expected_context
        else:
            assert second.context_id not in ("", first.context_id)


async def test_another_callers_reused_id_is_its_own_task(engine: TaskEngine) -> None:
    alices = await send(engine, "hi", ALICE, message_id="dup")
    bobs = await send(engine, "hi", BOB, message_id="dup")
    assert bobs.id != alices.id
    again = await send(engine, "hi", Caller(name="bob"), message_id="dup")  # no workspace
    assert again.id not in (alices.id, bobs.id)


async def test_a_reused_id_with_a_task_id_continues_that_task(engine: TaskEngine) -> None:
    asked = await send(engine, "ask:Which city?", message_id="dup")
    assert state_name(asked) == "INPUT_REQUIRED"
    answered = await send(engine, "Lisbon", message_id="dup", task_id=asked.id)
    assert answered.id == asked.id
    assert state_name(answered) == "COMPLETED"
    assert [m.parts[0].text for m in answered.history if m.role == pb.ROLE_USER] == [
        "ask:Which city?",
        "Lisbon",
    ]
    # ... and that answer, sent again, is a retry: no second turn.
    again = await send(engine, "Lisbon", message_id="dup", task_id=asked.id)
    assert again.id == asked.id
    assert len(again.history) == len(answered.history)


async def test_a_reused_id_with_an_inline_push_config_keeps_its_config(
    new_engine: Callable[..., TaskEngine],
) -> None:
    engine = new_engine(push_enabled=True)
    first = await send(engine, "hi", message_id="dup")
    req = request("hi again", message_id="dup")
    req.configuration.task_push_notification_config.url = "https://hooks.example/a2a"
    req.configuration.task_push_notification_config.id = "hook"
    second = (await engine.send_message(req, ctx())).task
    assert second.id != first.id
    listed = await engine.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=second.id), ctx()
    )
    assert [c.id for c in listed.configs] == ["hook"]
    none = await engine.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=first.id), ctx()
    )
    assert list(none.configs) == []


async def test_a_streamed_different_message_under_a_live_id_is_new(engine: TaskEngine) -> None:
    held = await send(engine, "hold:30", message_id="dup", return_immediately=True)
    events = await collect(engine.send_streaming_message(request("hi", message_id="dup"), ctx()))
    assert events[0].task.id != held.id
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    await engine.cancel_task(pb.CancelTaskRequest(id=held.id), ctx())


class _HeldReplies(FauxAgent):
    """The faux agent whose ``reply`` hook waits until the test lets each call go."""

    def __init__(self) -> None:
        self.calls: list[asyncio.Event] = []
        self.entered = asyncio.Condition()

    async def reply(self, turn: Turn) -> pb.Message | None:
        go = asyncio.Event()
        async with self.entered:
            self.calls.append(go)
            self.entered.notify_all()
        await go.wait()
        return await super().reply(turn)


async def test_a_retry_sent_while_the_first_is_with_the_agent_gets_its_task(
    new_engine: Callable[..., TaskEngine],
) -> None:
    """Both copies pass the first retry lookup before either made a task; the second
    looks again once its agent hook returns, and finds the task the first made."""
    agent = _HeldReplies()
    engine = new_engine(agent)

    async def calls(count: int) -> None:
        async with agent.entered:
            await agent.entered.wait_for(lambda: len(agent.calls) >= count)

    async with asyncio.timeout(WAIT_S):
        first = asyncio.create_task(send(engine, **_send_kwargs({})))
        await calls(1)
        second = asyncio.create_task(send(engine, **_send_kwargs({})))
        await calls(2)
        agent.calls[0].set()
        made = await first
        agent.calls[1].set()
        again = await second
    assert again.id == made.id
    assert len((await engine.list_tasks(pb.ListTasksRequest(), ctx())).tasks) == 1


# --- the file store keeps the keys it found in memory (task_index.FOUND_KEYS) --------


@pytest.fixture
async def on_files(tmp_path: Path) -> AsyncIterator[tuple[TaskEngine, WorkspaceTaskStore]]:
    store = WorkspaceTaskStore(tmp_path / "ws")
    engine = TaskEngine(FauxAgent(), store)
    yield engine, store
    await engine.aclose()


async def _found_in_memory(engine: TaskEngine, store: WorkspaceTaskStore) -> pb.Task:
    """A task whose retry key is committed, then found by two retries (the first reads
    the database, the second the keys kept in memory)."""
    first = await send(engine, **_send_kwargs({}))
    await store.index.flushed()
    for _ in range(2):
        again = await send(engine, **_send_kwargs({}))
        assert again.id == first.id
        assert len(again.history) == len(first.history)  # no second turn
    return first


def _key_of_first() -> tuple[str, str]:
    return "dup", message_fingerprint(_message())


async def test_a_found_retry_of_a_task_file_removed_by_hand_is_a_new_message(
    on_files: tuple[TaskEngine, WorkspaceTaskStore],
) -> None:
    """The keys kept in memory name a task; the task is read (its file stat'ed) on every
    retry, so one removed by hand is not served, and the message makes a new task that
    later retries find (not the removed one's id, not a third task)."""
    engine, store = on_files
    first = await _found_in_memory(engine, store)
    store.path(first.id).unlink()
    second = await send(engine, **_send_kwargs({}))
    assert second.id != first.id
    assert state_name(second) == "COMPLETED"
    await store.index.flushed()
    for _ in range(2):
        assert (await send(engine, **_send_kwargs({}))).id == second.id
    assert [t.id for t in (await engine.list_tasks(pb.ListTasksRequest(), ctx())).tasks] == [
        second.id
    ]


async def test_a_retry_is_answered_with_the_task_file_as_it_is_now(
    on_files: tuple[TaskEngine, WorkspaceTaskStore],
) -> None:
    """A retry of a stored task is answered with the bytes the record cache holds
    (``stored_bytes``), the file stat'ed first: a file edited by hand is what the next
    retry gets, and ``historyLength`` still trims the answer."""
    engine, store = on_files
    first = await _found_in_memory(engine, store)
    path = store.path(first.id)
    document = orjson.loads(path.read_bytes())
    document["task"]["metadata"] = {"edited": "by hand"}
    path.write_bytes(orjson.dumps(document))
    again = await send(engine, **_send_kwargs({}))
    assert again.id == first.id
    assert dict(again.metadata) == {"edited": "by hand"}
    assert len(again.history) == len(first.history) > 0
    trimmed = await send(engine, **_send_kwargs({}), history_length=0)
    assert trimmed.id == first.id
    assert list(trimmed.history) == []
    assert dict(trimmed.metadata) == {"edited": "by hand"}


async def test_a_retry_answered_from_a_task_file_prints_the_task_as_the_encoder_does(
    on_files: tuple[TaskEngine, WorkspaceTaskStore],
) -> None:
    """A retry answered from a task file reuses the file's task JSON when the file holds
    it as the encoder writes it (edited or not), and encodes the task anew when the file
    holds an equivalent other shape (keys reordered, a default written out): the answer's
    JSON is the task's as ``to_dict`` writes it either way, never a stale one."""
    engine, store = on_files
    first = await _found_in_memory(engine, store)
    path = store.path(first.id)

    async def answer_json() -> tuple[pb.Task, bytes]:
        async with asyncio.timeout(WAIT_S):
            response = await engine.send_message(request(**_send_kwargs({})), ctx(ALICE))
        return response.task, codec.to_json(response)

    document = orjson.loads(path.read_bytes())
    document["task"]["artifacts"][0]["parts"][0]["text"] = "edited"  # the encoder's shape
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    task, printed = await answer_json()
    assert task.artifacts[0].parts[0].text == "edited"
    assert printed == b'{"task":' + orjson.dumps(document["task"]) + b"}"
    assert recent_task_json(task) == orjson.dumps(document["task"])  # the file's, kept

    reordered = {key: document["task"][key] for key in reversed(document["task"])}
    reordered["artifacts"][0]["name"] = ""  # a default written out
    path.write_bytes(orjson.dumps({**document, "task": reordered}))
    task, printed = await answer_json()
    assert task.artifacts[0].name == "" and task.artifacts[0].parts[0].text == "edited"
    assert printed == b'{"task":' + orjson.dumps(to_dict(task)) + b"}"
    assert printed != b'{"task":' + orjson.dumps(reordered) + b"}"
    assert recent_task_json(task) is None  # (encoded anew, not kept)


async def test_a_found_key_of_an_expired_task_is_gone_with_it(
    on_files: tuple[TaskEngine, WorkspaceTaskStore],
) -> None:
    """Retention removes the task's row and with it its keys: the key found before is
    not answered from memory, and the retry is a new message."""
    engine, store = on_files
    first = await _found_in_memory(engine, store)
    assert await store.expire(time.time_ns() + 10**9, 10) == 1
    await store.index.flushed()
    assert store.find_message(ALICE, *_key_of_first()) is None
    second = await send(engine, **_send_kwargs({}))
    assert second.id != first.id
    assert state_name(second) == "COMPLETED"


async def test_a_found_key_of_a_task_whose_file_went_is_dropped_by_the_listing(
    on_files: tuple[TaskEngine, WorkspaceTaskStore],
) -> None:
    """A file removed behind the server's back: the listing that notices drops its row,
    and the key found before with it."""
    engine, store = on_files
    first = await _found_in_memory(engine, store)
    store.path(first.id).unlink()
    assert list((await engine.list_tasks(pb.ListTasksRequest(), ctx())).tasks) == []
    await store.index.flushed()
    assert store.find_message(ALICE, *_key_of_first()) is None


async def test_a_changed_message_under_a_found_id_is_new(
    on_files: tuple[TaskEngine, WorkspaceTaskStore],
) -> None:
    engine, store = on_files
    first = await _found_in_memory(engine, store)
    changed = await send(engine, **_send_kwargs({"text": "hi!"}))
    assert changed.id != first.id
    assert changed.history[0].parts[0].text == "hi!"
    assert (await send(engine, **_send_kwargs({}))).id == first.id
    await store.index.flushed()
    assert (await send(engine, **_send_kwargs({"text": "hi!"}))).id == changed.id
    assert (await send(engine, **_send_kwargs({}))).id == first.id


async def _settled_in_a_closed_process(folder: Path, **send_kwargs: Any) -> pb.Task:
    """A task sent and settled by an engine on ``folder``, closed since (its index too)."""
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(folder))
    try:
        return await send(engine, **_send_kwargs(send_kwargs))
    finally:
        await engine.aclose()


async def _json_retry(
    engine: TaskEngine, caller: Caller = ALICE, **kwargs: Any
) -> tuple[pb.SendMessageResponse, bytes | None]:
    """A retry of FIRST from a binding that prints JSON: the answer, and the task JSON
    the service handed in its place (None: none)."""
    context = ctx(caller, prints_json=True)
    async with asyncio.timeout(WAIT_S):
        answer = await engine.send_message(request(**_send_kwargs({}), **kwargs), context)
    return answer, context.task_json


async def test_a_fresh_process_answers_a_json_retry_with_the_task_file_s_json(
    tmp_path: Path,
) -> None:
    """A retry a fresh process answers, for a binding that prints the answer as JSON, is
    the task file's task JSON, handed as ``CallContext.task_json`` with no task decoded
    (the answer names the task only) when the index vouches for the file: its row has
    the file's stamp, a settled task, the caller, the encoder's shape. Printed, it is the
    first answer's JSON. A binding that reads the task, a ``historyLength`` or another
    caller get what they got before."""
    folder = tmp_path / "ws"
    first = await _settled_in_a_closed_process(folder)
    stored = orjson.loads((folder / ".a2a" / "tasks" / f"{first.id}.json").read_bytes())
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(folder))
    try:
        answer, task_json = await _json_retry(engine)
        assert answer == pb.SendMessageResponse(task=pb.Task(id=first.id))
        assert task_json == orjson.dumps(stored["task"])
        printed = codec.answer_json(answer, task_json)
        assert printed == codec.to_json(pb.SendMessageResponse(task=first))
        answer, task_json = await _json_retry(engine)  # again: the same, not decoded
        assert (answer.task, task_json) == (pb.Task(id=first.id), orjson.dumps(stored["task"]))
        trimmed, task_json = await _json_retry(engine, history_length=0)
        assert task_json is None
        assert trimmed.task.id == first.id and list(trimmed.task.history) == []
        assert trimmed.task.status == first.status
        async with asyncio.timeout(WAIT_S):
            read = await engine.send_message(request(**_send_kwargs({})), ctx(ALICE))
        assert read.task == first  # a binding that reads the task gets it whole
        other, task_json = await _json_retry(engine, caller=BOB)
        assert task_json is None and other.task.id != first.id  # not Bob's: a new task
    finally:
        await engine.aclose()


@pytest.mark.parametrize("rebuilt", [False, True])
@pytest.mark.parametrize("shape", ["encoder", "foreign", "spread", "spaced"])
async def test_a_json_retry_of_a_file_edited_by_hand_prints_its_line_only_if_vouched_for(
    tmp_path: Path, rebuilt: bool, shape: str
) -> None:
    """A task file rewritten by hand while no process ran, its task edited: as the
    encoder writes it (``encoder``), in another shape (``foreign``: keys reordered, a
    field this gateway does not know), or in the encoder's shape but not on one line as
    the encoder prints it (``spread`` over lines, ``spaced`` after its commas and
    colons). Its stamp is not the row's, so it is decoded for the answer: the edit
    shows, the unknown field does not, the JSON printed is the encoder's. Once the index
    is rebuilt (``rebuilt``), the index vouches for the encoder's line, whose bytes are
    then the answer's, and for no other."""
    folder = tmp_path / "ws"
    first = await _settled_in_a_closed_process(folder)
    path = folder / ".a2a" / "tasks" / f"{first.id}.json"
    document = orjson.loads(path.read_bytes())
    task = document["task"]
    task["artifacts"][0]["parts"][0]["text"] = "edited"
    if shape == "foreign":
        document["task"] = {"unknownToUs": 1, **{key: task[key] for key in reversed(task)}}
    elif shape == "encoder":
        document["task"] = orjson.Fragment(orjson.dumps(task))
    elif shape == "spaced":
        document["task"] = orjson.Fragment(json.dumps(task).encode())
    written = orjson.dumps(document, option=orjson.OPT_INDENT_2)  # (a dict: spread)
    assert (b'"task": {"id": ' in written) is (shape == "spaced")
    path.write_bytes(written)
    if rebuilt:
        (folder / ".a2a" / "index.sqlite3").unlink()
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(folder))
    try:
        answer, task_json = await _json_retry(engine)
        if shape == "encoder" and rebuilt:
            assert task_json == orjson.dumps(task) and answer.task == pb.Task(id=first.id)
        else:
            assert task_json is None
            assert answer.task.artifacts[0].parts[0].text == "edited"
        assert codec.answer_json(answer, task_json) == orjson.dumps({"task": task})
    finally:
        await engine.aclose()


@contextlib.asynccontextmanager
async def _served(folder: Path) -> AsyncIterator[str]:
    """The engine of a process on ``folder`` behind the HTTP app; its base URL."""
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(folder))
    config = ServerConfig(host="127.0.0.1")
    runner = aiohttp.web.AppRunner(
        build_http_app(engine, config, AllowAnonymous(), CardProvider(config))
    )
    await runner.setup()
    try:
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
        await engine.aclose()


async def test_both_json_bindings_print_a_fresh_process_s_stored_task_as_before(
    tmp_path: Path,
) -> None:
    """JSON-RPC and HTTP+JSON answer a retry, and a GetTask, that a fresh process finds
    with the bytes they answered before the restart (the task file's JSON, printed in the
    task's place)."""
    message = {"role": "ROLE_USER", "messageId": "m-http", "parts": [{"text": "hi"}]}
    rpc = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": message}}
    sends = [("/a2a", rpc), ("/a2a/v1/message:send", {"message": {**message, "messageId": "m-r"}})]
    headers = {"A2A-Version": "1.0"}

    async def answers(base: str) -> list[bytes]:
        bodies = []
        async with aiohttp.ClientSession() as http, asyncio.timeout(WAIT_S):
            for path, body in sends:
                async with http.post(base + path, json=body, headers=headers) as response:
                    assert response.status == 200
                    bodies.append(await response.read())
            task_id = orjson.loads(bodies[0])["result"]["task"]["id"]
            get = {"jsonrpc": "2.0", "id": 8, "method": "GetTask", "params": {"id": task_id}}
            async with http.post(base + "/a2a", json=get, headers=headers) as response:
                bodies.append(await response.read())
            async with http.get(f"{base}/a2a/v1/tasks/{task_id}", headers=headers) as response:
                bodies.append(await response.read())
        return bodies

    folder = tmp_path / "ws"
    async with _served(folder) as base:
        first = await answers(base)
    assert [b'"TASK_STATE_COMPLETED"' in body for body in first] == [True] * 4
    assert orjson.loads(first[3]) == orjson.loads(first[2])["result"]
    async with _served(folder) as base:
        assert await answers(base) == first


async def test_a_fresh_process_answers_a_json_get_task_with_the_task_file_s_json(
    tmp_path: Path,
) -> None:
    """GetTask of a settled task, for a binding that prints JSON, is the task JSON its
    cached record kept (``CallContext.task_json``; the answer names the task only): the
    first GetTask of a fresh process loads it (and the cache keeps it), the next ones
    print the JSON. A ``historyLength``, a binding that reads the task, another caller,
    and an active task (recovered: failed, the server restarted) get what they got
    before."""
    folder = tmp_path / "ws"
    store = WorkspaceTaskStore(folder)
    engine = TaskEngine(FauxAgent(), store)
    try:
        first = await send(engine, **_send_kwargs({}))
        held = pb.Task(id="held", context_id="c", status=pb.TaskStatus(state=pb.TASK_STATE_WORKING))
        await store.save(TaskRecord(held, ALICE))  # a run a killed process had
    finally:
        await engine.aclose()
    engine = TaskEngine(FauxAgent(), WorkspaceTaskStore(folder))
    path = folder / ".a2a" / "tasks" / f"{first.id}.json"

    async def get(task_id: str, caller: Caller = ALICE, **fields: Any) -> tuple[pb.Task, Any]:
        context = ctx(caller, prints_json=True)
        async with asyncio.timeout(WAIT_S):
            task = await engine.get_task(pb.GetTaskRequest(id=task_id, **fields), context)
        return task, context.task_json

    try:
        task, task_json = await get(first.id)
        assert task == first and task_json is None  # loaded, and kept by the cache
        task, task_json = await get(first.id)
        assert task == pb.Task(id=first.id)
        assert task_json == orjson.dumps(orjson.loads(path.read_bytes())["task"])
        assert codec.answer_json(task, task_json) == codec.to_json(first)
        trimmed, task_json = await get(first.id, history_length=0)
        assert task_json is None and trimmed.id == first.id and list(trimmed.history) == []
        async with asyncio.timeout(WAIT_S):
            read = await engine.get_task(pb.GetTaskRequest(id=first.id), ctx(ALICE))
        assert read == first
        with pytest.raises(TaskNotFoundError):
            await get(first.id, caller=BOB)
        recovered, task_json = await get("held")
        assert task_json is None and state_name(recovered) == "FAILED"
    finally:
        await engine.aclose()
