"""What the server accepts, it can give back (issue 10, item 7).

A message exactly as large as the body cap (24 MiB of JSON, or of binary on gRPC) is
accepted on every binding; the task holding it is read back by GetTask and ListTasks
on every binding, by our client on every transport, and by the CLI. One byte more is
the binding's size error, never a rate limit. One gateway, one big task per binding: the
test moves a few hundred MiB through loopback, in seconds.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
import pytest

import lf.a2a.v1.a2a_pb2 as pb
import lf.a2a.v1.a2a_pb2_grpc as a2a_pb2_grpc
from a2a_gateway.client import connect
from a2a_gateway.client.grpc_transport import MAX_RECEIVE_BYTES, size_error
from a2a_gateway.protocol import errors
from a2a_gateway.protocol.codec import MAX_ANSWER_BYTES, MAX_BODY_BYTES
from a2a_gateway.serve import Gateway

from .conftest import KEY_ALICE, running_gateway
from .test_cli import cli

CAP = MAX_BODY_BYTES
HEADERS = {"X-API-Key": KEY_ALICE, "A2A-Version": "1.0", "Content-Type": "application/json"}
METADATA = (("x-api-key", KEY_ALICE), ("a2a-version", "1.0"))
GRPC_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def _message(name: str, filler: str) -> dict[str, Any]:
    """``hold:0`` completes at once without echoing; the filler stays in the history."""
    return {
        "role": "ROLE_USER",
        "messageId": f"big-{name}",
        "contextId": f"ctx-{name}",
        "parts": [{"text": "hold:0"}, {"text": filler}],
    }


def _sized(build: Any, size: int) -> bytes:
    """``build(filler)`` serialized to exactly ``size`` bytes."""
    empty = build("")
    return build("x" * (size - len(empty)))


def jsonrpc_body(size: int) -> bytes:
    def build(filler: str) -> bytes:
        params = {"message": _message("jsonrpc", filler)}
        return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params})

    return _sized(build, size)


def rest_body(size: int) -> bytes:
    return _sized(lambda filler: orjson.dumps({"message": _message("rest", filler)}), size)


def grpc_body(size: int) -> bytes:
    def build(filler: str) -> bytes:
        parts = [pb.Part(text="hold:0"), pb.Part(text=filler)]
        message = pb.Message(
            role=pb.ROLE_USER, message_id="big-grpc", context_id="ctx-grpc", parts=parts
        )
        return pb.SendMessageRequest(message=message).SerializeToString()

    # The filler's length prefixes (varints) grow with it: aim, then step back.
    length = size - len(build(""))
    while len(data := build("x" * length)) > size:
        length -= len(data) - size
    return data


def _filler_length(task: dict[str, Any]) -> int:
    return len(task["history"][0]["parts"][1]["text"])


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    """Tasks in memory: what is measured is the bindings, not the task files."""
    async with running_gateway(tmp_path, store="memory") as server:
        yield server


@pytest.fixture
async def http(gateway: Gateway) -> Any:
    base = f"http://127.0.0.1:{gateway.http_port}"
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(base, timeout=timeout) as session:
        yield session


@pytest.fixture
async def stub(gateway: Gateway) -> Any:
    target = f"127.0.0.1:{gateway.grpc_port}"
    async with grpc.aio.insecure_channel(target, options=GRPC_OPTIONS) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def test_the_caps_derive_from_one_constant(gateway: Gateway) -> None:
    assert gateway.config.max_body_bytes == CAP == 24 * 1024 * 1024
    assert MAX_RECEIVE_BYTES == MAX_ANSWER_BYTES >= CAP  # the client reads what we send


async def test_a_message_as_large_as_the_cap_goes_in_and_comes_back(
    gateway: Gateway, http: aiohttp.ClientSession, stub: Any
) -> None:
    # In, on every binding: exactly CAP bytes each.
    body = jsonrpc_body(CAP)
    assert len(body) == CAP
    async with http.post("/a2a", data=io.BytesIO(body), headers=HEADERS) as response:
        answer = await response.json()
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    del body, answer
    body = rest_body(CAP)
    assert len(body) == CAP
    async with http.post(
        "/a2a/v1/message:send", data=io.BytesIO(body), headers=HEADERS
    ) as response:
        assert response.status == 200, await response.text()
        task_id = (await response.json())["task"]["id"]
    del body
    data = grpc_body(CAP)
    assert len(data) == CAP
    sent = await stub.SendMessage(pb.SendMessageRequest.FromString(data), metadata=METADATA)
    assert sent.task.status.state == pb.TASK_STATE_COMPLETED
    del data, sent
    # Back, on every binding, for one of them (each read is a CAP-sized answer).
    context_id = "ctx-rest"
    filler = CAP - len(orjson.dumps({"message": _message("rest", "")}))  # REST's filler
    body = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
    async with http.post("/a2a", json=body, headers=HEADERS) as response:
        assert _filler_length((await response.json())["result"]) == filler
    body = {"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {"contextId": context_id}}
    async with http.post("/a2a", json=body, headers=HEADERS) as response:
        assert _filler_length((await response.json())["result"]["tasks"][0]) == filler
    async with http.get(f"/a2a/v1/tasks/{task_id}", headers=HEADERS) as response:
        assert _filler_length(await response.json()) == filler
    async with http.get(f"/a2a/v1/tasks?contextId={context_id}", headers=HEADERS) as response:
        assert _filler_length((await response.json())["tasks"][0]) == filler
    task = await stub.GetTask(pb.GetTaskRequest(id=task_id), metadata=METADATA)
    assert len(task.history[0].parts[1].text) == filler
    listing = await stub.ListTasks(pb.ListTasksRequest(context_id=context_id), metadata=METADATA)
    assert len(listing.tasks[0].history[0].parts[1].text) == filler
    del task, listing
    # Our client: GetTask on every transport, ListTasks on one (the same answer paths).
    url = f"http://127.0.0.1:{gateway.http_port}"
    for transport in ("jsonrpc", "rest", "grpc"):
        async with await connect(url, key=KEY_ALICE, transport=transport) as service:
            got = await service.get_task(pb.GetTaskRequest(id=task_id))
            assert len(got.history[0].parts[1].text) == filler, transport
            if transport == "grpc":
                found = await service.list_tasks(pb.ListTasksRequest(context_id=context_id))
                assert len(found.tasks[0].history[0].parts[1].text) == filler
            del got
    # The CLI (JSON lines), get and list.
    for args in (("get", url, task_id), ("list", url, "--context-id", context_id)):
        run = await cli(*args, "--json", "--transport", "grpc")
        assert run.code == 0, run.stderr[-2000:]
        assert len(run.stdout) > filler, args  # the whole task, filler included, was printed
        del run


async def test_one_byte_over_the_cap_is_the_size_error_on_every_binding(
    gateway: Gateway, http: aiohttp.ClientSession, stub: Any
) -> None:
    async with http.post(
        "/a2a", data=io.BytesIO(jsonrpc_body(CAP + 1)), headers=HEADERS
    ) as response:
        answer = await response.json()
    assert answer["error"]["code"] == -32600 and "larger than" in answer["error"]["message"]
    body = rest_body(CAP + 1)
    async with http.post(
        "/a2a/v1/message:send", data=io.BytesIO(body), headers=HEADERS
    ) as response:
        assert response.status == 400
        assert "larger than" in (await response.json())["error"]["message"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SendMessage(
            pb.SendMessageRequest.FromString(grpc_body(CAP + 1)), metadata=METADATA
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "larger than" in str(caught.value.details())
    # Through our client: the size error, never RateLimited, however far over.
    url = f"http://127.0.0.1:{gateway.http_port}"
    async with await connect(url, key=KEY_ALICE, transport="grpc") as service:
        for size in (CAP + 1, CAP + 3 * 1024 * 1024):
            request = pb.SendMessageRequest.FromString(grpc_body(size))
            with pytest.raises(errors.A2AError) as failure:
                await service.send_message(request)
            assert type(failure.value) is errors.InvalidRequestError, failure.value
            assert "larger than" in failure.value.message


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        (f"Received message larger than max (60000000 vs. {MAX_RECEIVE_BYTES})", "answer"),
        ("Received message larger than max (26000000 vs. 25165824)", "request"),
        ("Sent message larger than max (90000000 vs. 26214400)", "request"),
        ("Too many requests", None),
    ],
)
def test_grpc_size_failures_are_never_rate_limits(details: str, expected: str | None) -> None:
    error = size_error(details)
    if expected is None:
        assert error is None
    elif expected == "answer":
        assert isinstance(error, errors.InvalidAgentResponseError)
    else:
        assert isinstance(error, errors.InvalidRequestError)


def test_json_sizes_are_exact() -> None:
    assert len(jsonrpc_body(1000)) == 1000 and len(rest_body(1000)) == 1000
    assert json.loads(jsonrpc_body(1000))["params"]["message"]["parts"][0]["text"] == "hold:0"
    assert len(grpc_body(100_000)) == 100_000
