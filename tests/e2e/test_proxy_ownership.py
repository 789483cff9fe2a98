"""Proxy mode remembers who owns each task across restarts: record files under
``<workspace>/.a2a/proxy-tasks/``. The upstream is our own gateway (faux agent, in
process, real port); the proxy is a second in-process gateway on the same workspace,
stopped and started again to play a restart. Calls are raw JSON-RPC over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from a2a_gateway import proxy_listing
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.context import Caller
from a2a_gateway.protocol.errors import TaskNotFoundError, UnavailableError
from a2a_gateway.proxy_owners import RECORDS_FOLDER, TaskOwners
from a2a_gateway.serve import Gateway
from a2a_gateway.server.paging import PageTokens
from a2a_gateway.settings import resolve
from lf.a2a.v1 import a2a_pb2 as pb

from .conftest import BINDINGS, KEY_ALICE, KEY_BOB, Driver, WireError

TIMEOUT = aiohttp.ClientTimeout(total=30)
VERSION = {"A2A-Version": "1.0"}
NOT_FOUND = -32001
LOGGER = "a2a_gateway.proxy_owners"

StartProxy = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def upstream() -> AsyncIterator[Gateway]:
    """Our own gateway with the faux agent, anonymous callers, memory store."""
    settings = resolve(
        {"port": 0, "grpc_port": -1, "faux": True, "allow_anonymous": True}, environ={}
    )
    server = Gateway(settings)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


#: The ``workspace`` of this module's tests: alice and bob may call it.
pytestmark = pytest.mark.callers(
    {"name": "alice", "key": KEY_ALICE}, {"name": "bob", "key": KEY_BOB}
)


@pytest.fixture
async def start_proxy(upstream: Gateway, workspace: Path) -> AsyncIterator[StartProxy]:
    """Starts ``serve --upstream <upstream> --workspace <workspace>`` in process."""
    running: list[Gateway] = []

    async def start(**extra: Any) -> Gateway:
        settings = resolve(
            {
                "upstream": f"http://127.0.0.1:{upstream.http_port}",
                "workspace": [str(workspace)],
                "port": 0,
                "grpc_port": -1,
                **extra,
            },
            environ={},
        )
        gateway = Gateway(settings)
        running.append(gateway)
        async with asyncio.timeout(30):
            await gateway.start()
        return gateway

    yield start
    for gateway in running:
        await gateway.stop()


async def restart(gateway: Gateway, start_proxy: StartProxy, **extra: Any) -> Gateway:
    await gateway.stop()
    return await start_proxy(**extra)


async def rpc(gateway: Gateway, method: str, params: dict[str, Any], key: str | None) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {**VERSION, **({"X-API-Key": key} if key else {})}
    async with (
        asyncio.timeout(30),
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        http.post(f"http://127.0.0.1:{gateway.http_port}/a2a", json=body, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        return await r.json()


def message(text: str, **extra: Any) -> dict[str, Any]:
    parts = [{"text": text}]
    return {
        "message": {
            "messageId": f"m-{os.urandom(6).hex()}",
            "role": "ROLE_USER",
            "parts": parts,
            **extra,
        }
    }


async def create_task(gateway: Gateway, key: str | None) -> str:
    reply = await rpc(gateway, "SendMessage", message("hello"), key)
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return str(task["id"])


async def get_task(gateway: Gateway, task_id: str, key: str) -> int | None:
    """None when the task came back, else the error code."""
    reply = await rpc(gateway, "GetTask", {"id": task_id}, key)
    if "error" in reply:
        return int(reply["error"]["code"])
    assert reply["result"]["id"] == task_id
    return None


async def listed(gateway: Gateway, key: str) -> set[str]:
    reply = await rpc(gateway, "ListTasks", {}, key)
    return {t["id"] for t in reply["result"]["tasks"]}


async def assert_hidden(gateway: Gateway, task_id: str, key: str) -> None:
    """Every operation on ``task_id`` is TaskNotFound for ``key``'s caller; not listed."""
    assert await get_task(gateway, task_id, key) == NOT_FOUND
    for method, params in (
        ("CancelTask", {"id": task_id}),
        ("SendMessage", message("mine now", taskId=task_id)),
        ("ListTaskPushNotificationConfigs", {"taskId": task_id}),
    ):
        reply = await rpc(gateway, method, params, key)
        assert reply["error"]["code"] == NOT_FOUND, (method, reply)
    assert task_id not in await listed(gateway, key)


def record_path(workspace: Path, task_id: str) -> Path:
    return workspace / RECORDS_FOLDER / f"{task_id}.json"


def record(workspace: Path, name: str) -> bytes:
    return json.dumps({"version": 1, "owner": {"name": name, "workspace": str(workspace)}}).encode()


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its content (None for folders and other kinds)."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() and not p.is_symlink() else None
        for p in sorted(root.rglob("*"))
    }


# --- through the proxy ------------------------------------------------------------------------


async def test_alices_task_stays_hers_after_a_restart(
    start_proxy: StartProxy, workspace: Path
) -> None:
    proxy = await start_proxy()
    task_id = await create_task(proxy, KEY_ALICE)
    saved = json.loads(record_path(workspace, task_id).read_bytes())
    assert saved == {"version": 1, "owner": {"name": "alice", "workspace": str(workspace)}}

    proxy = await restart(proxy, start_proxy)
    assert proxy.proxy is not None and proxy.proxy.owners.in_memory() == 0  # a fresh memory

    await assert_hidden(proxy, task_id, KEY_BOB)

    assert await get_task(proxy, task_id, KEY_ALICE) is None
    assert task_id in await listed(proxy, KEY_ALICE)
    saved = json.loads(record_path(workspace, task_id).read_bytes())
    assert saved["owner"]["name"] == "alice"  # bob's attempts changed nothing


async def test_without_records_a_restart_forgets_the_owner(
    start_proxy: StartProxy, workspace: Path
) -> None:
    """--store memory: owners in memory only, no files; after a restart nobody's."""
    proxy = await start_proxy(store="memory")
    task_id = await create_task(proxy, KEY_ALICE)
    assert await get_task(proxy, task_id, KEY_BOB) == NOT_FOUND
    proxy = await restart(proxy, start_proxy, store="memory")
    assert await get_task(proxy, task_id, KEY_BOB) == NOT_FOUND  # no first-come owner
    assert await get_task(proxy, task_id, KEY_ALICE) == NOT_FOUND
    assert task_id not in await listed(proxy, KEY_ALICE) | await listed(proxy, KEY_BOB)
    assert not (workspace / RECORDS_FOLDER).exists()


async def test_records_survive_eviction_from_the_memory_bound(
    start_proxy: StartProxy, workspace: Path
) -> None:
    proxy = await start_proxy()
    assert proxy.proxy is not None
    owners = proxy.proxy.owners
    owners.limit = 1
    first = await create_task(proxy, KEY_ALICE)
    second = await create_task(proxy, KEY_ALICE)
    assert owners.in_memory() == 1  # the first id is no longer in memory

    assert await get_task(proxy, first, KEY_BOB) == NOT_FOUND
    assert await get_task(proxy, first, KEY_ALICE) is None
    assert await get_task(proxy, second, KEY_BOB) == NOT_FOUND  # evicted by the reads
    assert {first, second} <= await listed(proxy, KEY_ALICE)
    assert not {first, second} & await listed(proxy, KEY_BOB)
    assert owners.in_memory() == 1


async def test_a_task_this_proxy_never_recorded_is_nobodys(
    upstream: Gateway, start_proxy: StartProxy, workspace: Path
) -> None:
    direct = await create_task(upstream, None)  # made upstream, not through the proxy
    proxy = await start_proxy()
    for task_id in ("no-such-task", direct):
        for key in (KEY_BOB, KEY_ALICE, KEY_BOB):  # no first-come ownership
            await assert_hidden(proxy, task_id, key)
        assert not record_path(workspace, task_id).exists()
    proxy = await restart(proxy, start_proxy)
    assert await get_task(proxy, direct, KEY_BOB) == NOT_FOUND


async def test_an_existing_record_is_final(
    upstream: Gateway, start_proxy: StartProxy, workspace: Path
) -> None:
    """A record written by another gateway on the same workspace is read from disk."""
    direct = await create_task(upstream, None)
    proxy = await start_proxy()
    folder = workspace / RECORDS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    record_path(workspace, direct).write_bytes(record(workspace, "alice"))
    assert await get_task(proxy, direct, KEY_BOB) == NOT_FOUND
    assert await get_task(proxy, direct, KEY_ALICE) is None


def _not_json(path: Path) -> None:
    path.write_bytes(b'{"version": 1, "owner": {"name": "alice"')


def _wrong_version(path: Path) -> None:
    path.write_bytes(json.dumps({"version": 2, "owner": {"name": "alice"}}).encode())


def _no_owner(path: Path) -> None:
    path.write_bytes(json.dumps({"version": 1, "owner": {"workspace": ""}}).encode())


def _a_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _a_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _a_symlink(path: Path) -> None:
    """Even to a record that would be valid: records are never followed."""
    target = path.with_name("elsewhere")
    path.rename(target)
    path.symlink_to(target.name)


@pytest.mark.parametrize(
    "spoil", [_not_json, _wrong_version, _no_owner, _a_folder, _a_fifo, _a_symlink]
)
async def test_a_malformed_record_hides_the_task_from_everyone(
    start_proxy: StartProxy,
    workspace: Path,
    caplog: pytest.LogCaptureFixture,
    spoil: Callable[[Path], None],
) -> None:
    proxy = await start_proxy()
    task_id = await create_task(proxy, KEY_ALICE)
    await proxy.stop()
    path = record_path(workspace, task_id)
    spoil(path)

    caplog.set_level(logging.WARNING, logger=LOGGER)
    proxy = await start_proxy()
    for key in (KEY_ALICE, KEY_BOB):
        assert await get_task(proxy, task_id, key) == NOT_FOUND
        assert task_id not in await listed(proxy, key)
        reply = await rpc(proxy, "SendMessage", message("again", taskId=task_id), key)
        assert reply["error"]["code"] == NOT_FOUND
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(warnings) == 1, warnings
    assert warnings[0].endswith(str(path)) and "malformed" in warnings[0]


async def test_path_like_task_ids_through_the_proxy_touch_no_file(
    start_proxy: StartProxy, workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Files the ids would reach do not parse as records: reading one would log it."""
    proxy = await start_proxy()
    await create_task(proxy, KEY_ALICE)  # the records folder exists, so ".." resolves
    (WorkspaceLayout(workspace).state / "planted.json").write_bytes(b"not a record")
    before = tree(tmp_path)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for task_id in ("../callers", "../planted", "../../.a2a/planted", "a/b", "/etc/passwd"):
        for method, params in (
            ("GetTask", {"id": task_id}),
            ("CancelTask", {"id": task_id}),
            ("SendMessage", message("hi", taskId=task_id)),
        ):
            reply = await rpc(proxy, method, params, KEY_BOB)
            assert "error" in reply, (method, task_id, reply)
            assert reply["error"]["code"] != -32603, reply  # never an internal error
    assert tree(tmp_path) == before
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == []


# --- TaskOwners on its own --------------------------------------------------------------------

ALICE = Caller("alice", "/ws")
BOB = Caller("bob", "/ws")


def test_path_like_ids_are_owned_in_memory_and_never_touch_the_file_system(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ws" / RECORDS_FOLDER
    folder.mkdir(parents=True)
    planted = json.dumps({"version": 1, "owner": {"name": "alice", "workspace": "/ws"}})
    for target in (tmp_path / "planted.json", tmp_path / "ws" / "planted.json"):
        target.write_text(planted)
    owners = TaskOwners(folder=folder)
    before = tree(tmp_path)
    ids = [
        "../../../planted",
        "../../planted",
        f"{tmp_path}/planted",
        "a/b",
        ".",
        "..",
        "x" * 101,
        "café",
        "a.json",
        "nul\x00byte",
        "line\nbreak",
    ]
    for task_id in ids:
        assert owners.path(task_id) is None
        assert owners.owner(task_id) is None  # the planted records were not read
        owners.claim(BOB, task_id)
        owners.check(BOB, task_id)
        with pytest.raises(TaskNotFoundError):
            owners.check(ALICE, task_id)  # owned, in memory
    assert tree(tmp_path) == before
    assert owners.in_memory() == len(ids)


def test_a_record_is_final_between_two_processes(tmp_path: Path) -> None:
    """Two gateways on one workspace race to claim a task the upstream has."""
    folder = tmp_path / RECORDS_FOLDER
    one, two = TaskOwners(folder=folder), TaskOwners(folder=folder)
    assert two.owner("t-1") is None  # unknown to both: both sends went upstream
    one.claim(ALICE, "t-1")  # alice's answer comes back first
    with pytest.raises(TaskNotFoundError):
        two.claim(BOB, "t-1")  # bob's answer is withheld
    assert json.loads((folder / "t-1.json").read_bytes())["owner"]["name"] == "alice"
    with pytest.raises(TaskNotFoundError):
        TaskOwners(folder=folder).check(BOB, "t-1")
    assert [p.name for p in folder.iterdir()] == ["t-1.json"]  # no temp file left


def test_stale_temp_files_are_removed_when_the_folder_is_opened(tmp_path: Path) -> None:
    folder = tmp_path / RECORDS_FOLDER
    folder.mkdir(parents=True)
    (folder / ".t-1.999.0.tmp").write_bytes(b'{"version": 1')
    (folder / "t-2.json").write_bytes(b'{"version": 1, "owner": {"name": "alice"}}')
    owners = TaskOwners(folder=folder)
    assert sorted(p.name for p in folder.iterdir()) == ["t-2.json"]
    assert owners.owner("t-2") == ("", "alice")
    assert owners.owner("t-1") is None


def test_a_record_that_cannot_be_written_is_kept_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = WorkspaceLayout(tmp_path).state
    blocker.write_text("a file where the folder should be")
    owners = TaskOwners.in_workspace(tmp_path)
    caplog.set_level(logging.ERROR, logger=LOGGER)
    owners.claim(ALICE, "t-1")
    with pytest.raises(TaskNotFoundError):
        owners.check(BOB, "t-1")
    owners.check(ALICE, "t-1")
    errors = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(errors) == 1 and "kept in memory only" in errors[0], errors
    assert blocker.read_text() == "a file where the folder should be"


def test_without_a_folder_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    owners = TaskOwners(limit=2)
    for task_id in ("t-1", "t-2", "t-3"):
        owners.claim(ALICE, task_id)
    assert owners.in_memory() == 2
    for caller in (ALICE, BOB):  # dropped from the bound: known nowhere, nobody's
        with pytest.raises(TaskNotFoundError):
            owners.check(caller, "t-1")
    owners.check(ALICE, "t-3")
    with pytest.raises(TaskNotFoundError):
        owners.check(BOB, "t-3")
    assert list(tmp_path.iterdir()) == []


# --- ListTasks through the proxy ------------------------------------------------------------


@contextlib.asynccontextmanager
async def drivers(gateway: Gateway, binding: str) -> AsyncIterator[Callable[[str], Driver]]:
    """A driver of ``binding`` for a caller's key."""
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
    ):
        base = f"http://127.0.0.1:{gateway.http_port}"
        yield lambda key: Driver(binding, http, base, channel, key=key)


async def every_page(driver: Driver, **params: Any) -> list[Any]:
    pages = [await driver.call("ListTasks", params)]
    while pages[-1].get("nextPageToken"):
        token = pages[-1]["nextPageToken"]
        pages.append(await driver.call("ListTasks", {**params, "pageToken": token}))
    return pages


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_tasks_shows_counts_and_pages_only_the_callers_tasks(
    upstream: Gateway, start_proxy: StartProxy, binding: str
) -> None:
    proxy = await start_proxy(grpc_port=0)
    upstream_only = {await create_task(upstream, None) for _ in range(4)}
    alices = {await create_task(proxy, KEY_ALICE) for _ in range(5)}
    bobs = {await create_task(proxy, KEY_BOB) for _ in range(2)}
    upstream_only |= {await create_task(upstream, None) for _ in range(3)}
    reply = await rpc(proxy, "SendMessage", message("in a context", contextId="trip"), KEY_ALICE)
    in_context = reply["result"]["task"]["id"]
    alices.add(in_context)

    async with drivers(proxy, binding) as driver_for:
        for key, own in ((KEY_ALICE, alices), (KEY_BOB, bobs)):
            for page_size in (1, 2, 4, 50):
                pages = await every_page(driver_for(key), pageSize=page_size)
                assert {p["totalSize"] for p in pages} == {len(own)}
                assert all(len(p["tasks"]) == p["pageSize"] <= page_size for p in pages)
                ids = [t["id"] for p in pages for t in p["tasks"]]
                assert len(ids) == len(set(ids)) and set(ids) == own, (key, page_size)
                assert len(pages) == -(-len(own) // page_size)
        only = await driver_for(KEY_ALICE).call("ListTasks", {"contextId": "trip"})
    assert only["totalSize"] == 1 and [t["id"] for t in only["tasks"]] == [in_context]
    assert not upstream_only & (alices | bobs)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_tasks_page_tokens_and_sizes_are_checked(
    start_proxy: StartProxy, binding: str
) -> None:
    proxy = await start_proxy(grpc_port=0)
    for _ in range(3):
        await create_task(proxy, KEY_ALICE)
    async with drivers(proxy, binding) as driver_for:
        first = await driver_for(KEY_ALICE).call("ListTasks", {"pageSize": 1})
        token = first["nextPageToken"]
        assert token
        for key, params in (
            (KEY_BOB, {"pageToken": token}),  # another caller's token
            (KEY_ALICE, {"pageToken": token, "contextId": "other"}),  # other filters
            (KEY_ALICE, {"pageToken": "forged"}),
            (KEY_ALICE, {"pageSize": 0}),
            (KEY_ALICE, {"pageSize": 101}),
        ):
            with pytest.raises(WireError) as refused:
                await driver_for(key).call("ListTasks", params)
            assert refused.value.reason == "INVALID_PARAMS", params


async def test_a_new_task_does_not_shift_the_next_page(start_proxy: StartProxy) -> None:
    proxy = await start_proxy()
    made = [await create_task(proxy, KEY_ALICE) for _ in range(3)]
    first = (await rpc(proxy, "ListTasks", {"pageSize": 2}, KEY_ALICE))["result"]
    newer = await create_task(proxy, KEY_ALICE)  # lands at the top of the list
    params = {"pageSize": 2, "pageToken": first["nextPageToken"]}
    second = (await rpc(proxy, "ListTasks", params, KEY_ALICE))["result"]
    shown = [t["id"] for t in first["tasks"]] + [t["id"] for t in second["tasks"]]
    assert sorted(shown) == sorted(made) and newer not in shown
    assert second["totalSize"] == 4


async def test_the_upstream_walk_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    owners = TaskOwners()
    owners.claim(ALICE, "t-0")
    asked: list[tuple[str, int]] = []

    async def endless(request: pb.ListTasksRequest) -> pb.ListTasksResponse:
        asked.append((request.page_token, request.page_size))
        page = len(asked)
        tasks = [pb.Task(id=f"t-{page * 10 + i}") for i in range(10)]
        return pb.ListTasksResponse(tasks=tasks, next_page_token=f"p{page}")

    async def stuck(request: pb.ListTasksRequest) -> pb.ListTasksResponse:
        asked.append((request.page_token, request.page_size))
        return pb.ListTasksResponse(tasks=[pb.Task(id="t-0")], next_page_token="same")

    monkeypatch.setattr(proxy_listing, "MAX_UPSTREAM_TASKS", 50)
    with pytest.raises(UnavailableError, match="too many tasks"):
        await proxy_listing.list_own_tasks(
            pb.ListTasksRequest(), ALICE, endless, owners, PageTokens()
        )
    assert [token for token, _ in asked] == ["", "p1", "p2", "p3", "p4", "p5"]
    assert {size for _, size in asked} == {proxy_listing.UPSTREAM_PAGE_SIZE}
    asked.clear()
    reply = await proxy_listing.list_own_tasks(
        pb.ListTasksRequest(), ALICE, stuck, owners, PageTokens()
    )
    assert [token for token, _ in asked] == ["", "same"]  # a repeated token ends the walk
    assert [t.id for t in reply.tasks] == ["t-0"] and reply.total_size == 1  # no duplicate
