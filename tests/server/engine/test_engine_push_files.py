"""The engine's push and file wiring: where received files go (and when they are
refused), files out by path, the push-config cap on continuations, push-config secrets
sealed at rest, and a notification after restart recovery (real dispatcher, real
webhook receiver on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_gateway.agent.base import Completed, File, Output, TextChunk, Turn
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.local.layout import RELATIVE, WorkspaceLayout
from a2a_gateway.protocol import errors
from a2a_gateway.protocol.context import ANONYMOUS
from a2a_gateway.server.engine import SAVED_AS_KEY, TaskEngine
from a2a_gateway.server.engine.rules import request_payload
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.memory_store import MemoryTaskStore
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.push import PushDispatcher
from a2a_gateway.server.secret_box import KEY_FILE
from a2a_gateway.server.task_store import TaskRecord
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.secrets import use_secret
from tests.support.workspace import write_callers

from .engine_helpers import WAIT_S, Scripted, ctx, request, send, state_name, status_text

TOKEN = "engine-push-token-4f1a9c7e2b"
CREDENTIALS = "engine-push-credentials-0d6b3e8a5f"
use_secret(TOKEN, CREDENTIALS)


def with_file(text: str, data: bytes, filename: str) -> pb.SendMessageRequest:
    req = request(text)
    req.message.parts.add(raw=data, filename=filename)
    return req


# --- files in -----------------------------------------------------------------------------


async def test_file_parts_need_somewhere_to_go(new_engine: Callable[..., TaskEngine]) -> None:
    engine = new_engine(store=MemoryTaskStore())  # no default workspace
    with pytest.raises(errors.ContentTypeNotSupportedError, match=r"message\.parts\[1\]"):
        await engine.send_message(with_file("hi", b"x", "a.txt"), ctx(ANONYMOUS))
    # Text still works, and nothing was created for the refused message.
    assert state_name(await send(engine, "hi", ANONYMOUS)) == "COMPLETED"
    listed = await engine.list_tasks(pb.ListTasksRequest(), ctx(ANONYMOUS))
    assert listed.total_size == 1


async def test_anonymous_files_go_to_the_default_workspace(
    new_engine: Callable[..., TaskEngine], tmp_path: Path
) -> None:
    engine = new_engine(store=MemoryTaskStore(), default_workspace=tmp_path)
    async with asyncio.timeout(WAIT_S):
        response = await engine.send_message(with_file("", b"abc", "a.txt"), ctx(ANONYMOUS))
    task = response.task
    assert state_name(task) == "COMPLETED"
    assert (tmp_path / "inbox" / "anonymous" / "a.txt").read_bytes() == b"abc"
    part = task.history[0].parts[1]
    assert part.WhichOneof("content") == "raw" and part.raw == b""
    assert part.metadata[SAVED_AS_KEY] == "inbox/anonymous/a.txt"


async def test_the_agent_gets_the_saved_paths(
    new_engine: Callable[..., TaskEngine], tmp_path: Path
) -> None:
    seen: list[tuple[Path, ...]] = []

    async def script(turn: Turn) -> AsyncIterator[Output]:
        seen.append(turn.files)
        yield Completed()

    engine = new_engine(Scripted(script), store=MemoryTaskStore(), default_workspace=tmp_path)
    req = with_file("two files", b"1", "one.txt")
    req.message.parts.add(raw=b"22", filename="two.txt")
    await engine.send_message(req, ctx(ANONYMOUS))
    inbox = (tmp_path / "inbox" / "anonymous").resolve()
    assert seen == [(inbox / "one.txt", inbox / "two.txt")]


async def test_a_url_part_without_an_outbound_client_fails_the_task(
    new_engine: Callable[..., TaskEngine], tmp_path: Path
) -> None:
    engine = new_engine(store=MemoryTaskStore(), default_workspace=tmp_path)
    req = request("fetch")
    req.message.parts.add(url="https://files.example/a.pdf")
    task = (await engine.send_message(req, ctx(ANONYMOUS))).task
    assert state_name(task) == "FAILED"
    assert status_text(task) == "message.parts[1]: files by URL are not accepted here"


# --- files out ----------------------------------------------------------------------------


async def test_files_out_by_path_stay_inside_the_workspace(
    new_engine: Callable[..., TaskEngine], tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "out").mkdir(parents=True)
    (workspace / "out" / "result.json").write_bytes(b'{"ok": true}')
    (tmp_path / "outside.txt").write_bytes(b"not yours")

    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield File("result.json", path=Path("out/result.json"))
        yield File("escape.txt", path=Path("../outside.txt"))
        yield TextChunk("done", last=True)

    engine = new_engine(Scripted(script), store=MemoryTaskStore(), default_workspace=workspace)
    task = await send(engine, "go", ANONYMOUS)
    assert state_name(task) == "COMPLETED"
    files = [p for a in task.artifacts for p in a.parts if p.WhichOneof("content") == "raw"]
    assert [(p.filename, p.media_type, p.raw) for p in files] == [
        ("result.json", "application/json", b'{"ok": true}')
    ]
    assert status_text(task) == "Files skipped: escape.txt (outside the workspace)."

    nowhere = new_engine(Scripted(script), store=MemoryTaskStore())
    task = await send(nowhere, "go", ANONYMOUS)
    assert [a.name for a in task.artifacts] == ["response"]
    assert "result.json (no workspace to read it from)" in status_text(task)


async def test_files_out_by_path_never_come_from_the_gateways_own_folder(
    new_engine: Callable[..., TaskEngine], tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    write_callers(workspace, '[{"name": "a", "key": "k_plain_key_1"}]')
    (workspace / "notes.txt").symlink_to(WorkspaceLayout(workspace).callers)

    async def script(turn: Turn) -> AsyncIterator[Output]:
        yield File("callers.json", path=RELATIVE.callers)
        yield File("callers2.json", path=WorkspaceLayout(workspace / "out" / "..").callers)
        yield File("notes.txt", path=Path("notes.txt"))  # a symlink into .a2a/
        yield TextChunk("done", last=True)

    engine = new_engine(Scripted(script), store=MemoryTaskStore(), default_workspace=workspace)
    task = await send(engine, "go", ANONYMOUS)
    assert state_name(task) == "COMPLETED"
    assert [a.name for a in task.artifacts] == ["response"]
    assert "k_plain_key_1" not in str(task)
    assert status_text(task).splitlines() == [
        f"Files skipped: {name} (in the gateway's own folder .a2a)."
        for name in ("callers.json", "callers2.json", "notes.txt")
    ]


# --- push configs -------------------------------------------------------------------------


async def test_a_continuation_over_the_push_cap_changes_nothing(
    new_engine: Callable[..., TaskEngine],
) -> None:
    engine = new_engine(push_enabled=True)
    task = await send(engine, "ask:Q?")
    for index in range(10):
        config = pb.TaskPushNotificationConfig(
            task_id=task.id, id=f"c{index}", url="https://hooks.example/a2a"
        )
        await engine.create_task_push_notification_config(config, ctx())
    answer = request("A", task_id=task.id)
    answer.configuration.task_push_notification_config.url = "https://hooks.example/more"
    with pytest.raises(errors.InvalidParamsError, match="at most 10"):
        await engine.send_message(answer, ctx())
    got = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
    assert state_name(got) == "INPUT_REQUIRED" and len(got.history) == 1
    assert state_name(await send(engine, "A", task_id=task.id)) == "COMPLETED"


async def test_push_secrets_are_sealed_at_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WorkspaceTaskStore(tmp_path)
    task = pb.Task(id="t1", context_id="c1")
    task.status.state = pb.TASK_STATE_INPUT_REQUIRED
    config = pb.TaskPushNotificationConfig(
        task_id="t1", id="hook", url="https://hooks.example/a2a", token=TOKEN
    )
    config.authentication.scheme = "Bearer"
    config.authentication.credentials = CREDENTIALS
    await store.save(TaskRecord(task, ANONYMOUS, [config]))
    path = WorkspaceLayout(tmp_path).tasks / "t1.json"
    text = path.read_text()
    assert TOKEN not in text and CREDENTIALS not in text
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600

    loaded = await WorkspaceTaskStore(tmp_path).load(ANONYMOUS, "t1")  # fresh: no cache
    assert loaded is not None and loaded.push_configs == [config]

    # A hand-edited plaintext token is read as is, and sealed by the next save.
    document = json.loads(text)
    document["pushConfigs"][0]["token"] = "hand-edited-token-77"
    path.write_text(json.dumps(document))
    edited = await WorkspaceTaskStore(tmp_path).load(ANONYMOUS, "t1")
    assert edited is not None and edited.push_configs[0].token == "hand-edited-token-77"
    await store.save(edited)
    assert "hand-edited-token-77" not in path.read_text()

    # A replaced key: the config is dropped, the task is still served.
    (tmp_path / KEY_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.server.file_store"):
        reloaded = await WorkspaceTaskStore(tmp_path).load(ANONYMOUS, "t1")
    assert reloaded is not None and reloaded.push_configs == []
    (warning,) = [r.getMessage() for r in caplog.records if "push config" in r.getMessage()]
    assert "push config hook dropped" in warning and str(path) in warning
    assert "enc:v1:" not in warning


async def test_restart_recovery_notifies_the_webhooks(tmp_path: Path) -> None:
    hits: list[tuple[dict[str, str], dict[str, object]]] = []
    arrived = asyncio.Event()

    async def hook(http_request: web.Request) -> web.Response:
        hits.append((dict(http_request.headers), orjson.loads(await http_request.read())))
        arrived.set()
        return web.Response()

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(access_log=None)
    store = WorkspaceTaskStore(tmp_path)
    task = pb.Task(id="t-running", context_id="c1")
    task.status.state = pb.TASK_STATE_WORKING  # written by a process that then died
    config = pb.TaskPushNotificationConfig(
        task_id=task.id, id="hook", url=f"http://127.0.0.1:{server.port}/hook", token=TOKEN
    )
    await store.save(TaskRecord(task, ANONYMOUS, [config]))
    outbound = OutboundClient(allow_private_urls=True)
    push = PushDispatcher(outbound)
    engine = TaskEngine(
        FauxAgent(), WorkspaceTaskStore(tmp_path), push_enabled=True, push=push, outbound=outbound
    )
    try:
        got = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx(ANONYMOUS))
        assert state_name(got) == "FAILED"
        async with asyncio.timeout(WAIT_S):
            await arrived.wait()
        assert await push.wait_idle(WAIT_S)
    finally:
        await engine.aclose()
        await push.aclose()
        await outbound.aclose()
        await server.close()
    ((headers, body),) = hits
    assert headers["X-A2A-Notification-Token"] == TOKEN
    assert body["task"]["status"]["state"] == "TASK_STATE_FAILED"  # type: ignore[index]


async def test_a_config_registered_over_0_3_gets_0_3_deliveries_after_a_restart(
    tmp_path: Path,
) -> None:
    """The version a config was made with is stored with it; a 0.3 one gets the bare 0.3
    Task as plain JSON, a 1.0 one ``{"task": …}`` as ``application/a2a+json``."""
    hits: dict[str, list[tuple[str, dict[str, object]]]] = {"legacy": [], "current": []}
    completed = asyncio.Event()

    async def hook(http_request: web.Request) -> web.Response:
        body = orjson.loads(await http_request.read())
        hits[http_request.match_info["name"]].append((http_request.content_type, body))
        if all(any("completed" in str(b).lower() for _, b in got) for got in hits.values()):
            completed.set()
        return web.Response()

    app = web.Application()
    app.router.add_post("/{name}", hook)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(access_log=None)
    outbound = OutboundClient(allow_private_urls=True)
    push = PushDispatcher(outbound)
    first = TaskEngine(
        FauxAgent(), WorkspaceTaskStore(tmp_path), push_enabled=True, push=push, outbound=outbound
    )
    try:
        asked = (await first.send_message(request("ask:Which city?"), ctx(ANONYMOUS))).task
        base = f"http://127.0.0.1:{server.port}"
        for name, version in (("legacy", "0.3"), ("current", "1.0")):
            config = pb.TaskPushNotificationConfig(task_id=asked.id, id=name, url=f"{base}/{name}")
            await first.create_task_push_notification_config(
                config, ctx(ANONYMOUS, version=version)
            )
        await first.aclose()
        path = WorkspaceLayout(tmp_path).tasks / f"{asked.id}.json"
        assert json.loads(path.read_text())["pushConfigVersions"] == {"legacy": "0.3"}

        second = TaskEngine(  # a restart: the versions come from the file
            FauxAgent(),
            WorkspaceTaskStore(tmp_path),
            push_enabled=True,
            push=push,
            outbound=outbound,
        )
        try:
            assert state_name(await send(second, "Lisbon", ANONYMOUS, task_id=asked.id)) == (
                "COMPLETED"
            )
            async with asyncio.timeout(WAIT_S):
                await completed.wait()
            delete = pb.DeleteTaskPushNotificationConfigRequest(task_id=asked.id, id="legacy")
            await second.delete_task_push_notification_config(delete, ctx(ANONYMOUS))
        finally:
            await second.aclose()
        assert "pushConfigVersions" not in json.loads(path.read_text())
    finally:
        await push.aclose()
        await outbound.aclose()
        await server.close()
    for content_type, body in hits["legacy"]:
        assert content_type == "application/json"
        assert body["kind"] == "task" and body["id"] == asked.id
    assert hits["legacy"][-1][1]["status"]["state"] == "completed"  # type: ignore[index]
    for content_type, body in hits["current"]:
        assert content_type == "application/a2a+json" and set(body) == {"task"}
    assert hits["current"][-1][1]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"  # type: ignore[index]


class FullDiskStore(WorkspaceTaskStore):
    """The real workspace store on a disk that fills up when ``full`` is set."""

    full = False

    async def save(self, record: TaskRecord) -> None:
        if self.full:
            raise OSError(28, "No space left on device")
        await super().save(record)


@pytest.mark.server_fault
async def test_a_push_config_change_that_cannot_be_stored_is_an_error(
    tmp_path: Path,
) -> None:
    # A stored task has no live run to retry the write: answering success would leave
    # a registered webhook that is never called, or a deleted one (and its token) kept.
    store = FullDiskStore(tmp_path)
    engine = TaskEngine(FauxAgent(), store, push_enabled=True)
    try:
        await _change_push_configs_on_a_full_disk(engine, store)
    finally:
        await engine.aclose()


async def _change_push_configs_on_a_full_disk(engine: TaskEngine, store: FullDiskStore) -> None:
    task = await send(engine, "hello")
    kept = pb.TaskPushNotificationConfig(task_id=task.id, id="kept", url="https://hooks.example/a")
    await engine.create_task_push_notification_config(kept, ctx())
    store.full = True
    added = pb.TaskPushNotificationConfig(
        task_id=task.id, id="added", url="https://hooks.example/b"
    )
    with pytest.raises(errors.InternalError) as raised:
        await engine.create_task_push_notification_config(added, ctx())
    assert "No space" not in raised.value.message  # no server detail in the answer
    deletion = pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="kept")
    with pytest.raises(errors.InternalError):
        await engine.delete_task_push_notification_config(deletion, ctx())
    listed = await engine.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task.id), ctx()
    )
    assert [c.id for c in listed.configs] == ["kept"]


@pytest.mark.server_fault
async def test_a_cancel_that_cannot_be_stored_is_an_error(tmp_path: Path) -> None:
    store = FullDiskStore(tmp_path)
    engine = TaskEngine(FauxAgent(), store)
    try:
        task = await send(engine, "ask:Q?")
        assert state_name(task) == "INPUT_REQUIRED"
        store.full = True
        with pytest.raises(errors.InternalError):
            await engine.cancel_task(pb.CancelTaskRequest(id=task.id), ctx())
        store.full = False
        got = await engine.get_task(pb.GetTaskRequest(id=task.id), ctx())
        assert state_name(got) == "INPUT_REQUIRED"
    finally:
        await engine.aclose()


def test_the_payload_leaves_out_file_bytes_and_push_secrets() -> None:
    # What {{payload}} gives a model (and so its transcript): never a push secret, never
    # a file's bytes (they are in the inbox), the rest of the params as they came.
    sent = pb.SendMessageRequest(
        message=pb.Message(
            message_id="m-1",
            role=pb.ROLE_USER,
            parts=[
                pb.Part(text="see attached"),
                pb.Part(raw=b"secret bytes", filename="a.txt", media_type="text/plain"),
            ],
        ),
        configuration=pb.SendMessageConfiguration(
            task_push_notification_config=pb.TaskPushNotificationConfig(
                url="https://hooks.example/h",
                token="push-token-77aa",
                authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="cred-88bb"),
            )
        ),
    )
    payload = request_payload(sent)
    assert "push-token-77aa" not in payload and "cred-88bb" not in payload
    assert base64.b64encode(b"secret bytes").decode() not in payload
    shown = orjson.loads(payload)
    assert shown["message"]["parts"][1]["filename"] == "a.txt"
    assert shown["configuration"]["taskPushNotificationConfig"] == {
        "url": "https://hooks.example/h",
        "authentication": {"scheme": "Bearer"},
    }
    assert sent.configuration.task_push_notification_config.token == "push-token-77aa"
