"""The gRPC binding's memo of retried sends (server/retry_memo.py), on a whole gateway:
the same call again is answered with the same bytes the engine's path gives, only
while what that answer was made of holds (the caller, the task file, the drain), and
is counted as every call is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol.context import ANONYMOUS
from a2a_gateway.serve import Gateway
from a2a_gateway.server.metrics import Metrics
from a2a_gateway.server.retry_memo import MAX_ANSWER_BYTES, RetryMemo
from tests.support.workspace import write_callers

from .conftest import KEY_ALICE, running_gateway

BOUND = 10.0  # seconds: an upper bound on anything that could hang, never asserted
SEND = "/lf.a2a.v1.A2AService/SendMessage"
ALICE = (("a2a-version", "1.0"), ("x-api-key", KEY_ALICE))


def _request(message_id: str = "m-memo", text: str = "hello") -> bytes:
    message = pb.Message(role=pb.ROLE_USER, message_id=message_id, parts=[pb.Part(text=text)])
    return pb.SendMessageRequest(message=message).SerializeToString()


def _identity(data: bytes) -> bytes:
    return data


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Gateway, grpc.aio.Channel]]:
    async with (
        running_gateway(tmp_path) as gateway,
        grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
    ):
        yield gateway, channel


async def _send(
    channel: grpc.aio.Channel, request: bytes, metadata: tuple[tuple[str, str], ...] = ALICE
) -> bytes:
    """The answer's bytes as they came off the wire."""
    send = channel.unary_unary(SEND, _identity, _identity)
    async with asyncio.timeout(BOUND):
        answer: bytes = await send(request, metadata=metadata, timeout=BOUND)
    return answer


def _memo(gateway: Gateway) -> RetryMemo:
    assert gateway.retry_memo is not None
    return gateway.retry_memo


def _task(answer: bytes) -> pb.Task:
    response = pb.SendMessageResponse.FromString(answer)
    assert response.HasField("task"), response
    return response.task


def _task_file(gateway: Gateway, task_id: str) -> Path:
    workspace = Path(gateway.config.workspaces[0])
    return WorkspaceLayout(workspace).tasks / f"{task_id}.json"


async def test_a_kept_answer_is_the_bytes_the_engine_answers(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    gateway, channel = served
    memo = _memo(gateway)
    first = await _send(channel, _request())  # a new task (its run, not the memo's)
    retried = await _send(channel, _request())  # a retry: the stored task, kept
    assert len(memo) == 1 and memo.hits == 0
    again = await _send(channel, _request())  # the same call: the kept answer
    assert memo.hits == 1
    # Other metadata is another call: the engine's path, byte for byte the same answer.
    engine = await _send(channel, _request(), (*ALICE, ("x-other", "1")))
    assert memo.hits == 1
    assert again == retried == engine
    assert _task(again).id == _task(first).id
    assert _task(again).status.state == pb.TASK_STATE_COMPLETED


async def test_an_edited_task_file_is_answered_anew(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    gateway, channel = served
    memo = _memo(gateway)
    task_id = _task(await _send(channel, _request())).id
    kept = await _send(channel, _request())
    path = _task_file(gateway, task_id)
    document = orjson.loads(path.read_bytes())
    document["task"]["metadata"] = {"edited": "by hand"}
    path.write_bytes(orjson.dumps(document))
    edited = await _send(channel, _request())
    assert memo.hits == 0  # the file changed: the engine's path
    assert edited != kept
    assert dict(_task(edited).metadata) == {"edited": "by hand"}
    assert await _send(channel, _request()) == edited  # kept anew
    assert memo.hits == 1
    removed = path.read_bytes()
    path.unlink()  # removed by hand: the retry is a new message (a new task)
    fresh = _task(await _send(channel, _request())).id
    assert fresh != task_id
    # The file put back: the retry key names the new task now, and so does the answer.
    path.write_bytes(removed)
    assert _task(await _send(channel, _request())).id == fresh
    assert memo.hits == 1


async def test_a_key_moved_behind_the_memo_is_not_answered_from_it(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    """The task file set aside, the same message sent over JSON-RPC (a new task takes the
    retry key; the gRPC memo never sees it), the file put back as it was (its stamp the
    same): the kept answer's file is unchanged, but the key names the new task."""
    gateway, channel = served
    memo = _memo(gateway)
    task_id = _task(await _send(channel, _request())).id
    await _send(channel, _request())  # kept
    path = _task_file(gateway, task_id)
    aside = path.with_suffix(".aside")
    path.rename(aside)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": "m-memo", "parts": [{"text": "hello"}]}
        },
    }
    headers = {"x-api-key": KEY_ALICE, "A2A-Version": "1.0"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{gateway.http_port}{gateway.config.mounts.jsonrpc}",
            json=body,
            headers=headers,
        ) as reply,
    ):
        answer = await reply.json()
        assert "result" in answer, answer
        moved = answer["result"]["task"]["id"]
    assert moved != task_id
    aside.rename(path)  # back as it was: the same inode, mtime and size
    assert _task(await _send(channel, _request())).id == moved
    assert memo.hits == 0


async def test_another_caller_is_not_given_a_kept_answer(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    """The same bytes and metadata admitted as another caller (the key moved to bob in
    callers.json) are bob's message, never alice's kept answer."""
    gateway, channel = served
    memo = _memo(gateway)
    alices = _task(await _send(channel, _request())).id
    await _send(channel, _request())  # kept for alice
    workspace = Path(gateway.config.workspaces[0])
    write_callers(workspace, [{"name": "bob", "key": KEY_ALICE}])
    bobs = _task(await _send(channel, _request()))
    assert memo.hits == 0
    assert bobs.id != alices


async def test_a_draining_gateway_refuses_instead_of_answering_from_the_memo(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    gateway, channel = served
    await _send(channel, _request())
    await _send(channel, _request())  # kept
    gateway.drain_gate.begin()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _send(channel, _request())
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _memo(gateway).hits == 0


async def test_a_kept_answer_still_needs_the_callers_credentials(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    gateway, channel = served
    await _send(channel, _request())
    await _send(channel, _request())  # kept
    workspace = Path(gateway.config.workspaces[0])
    write_callers(workspace, [{"name": "alice", "key": "alice-new-key-5b2c9d0e"}])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _send(channel, _request())
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _memo(gateway).hits == 0


def _samples(gateway: Gateway) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    assert isinstance(gateway.metrics, Metrics)
    registry = gateway.metrics.registry
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in ("a2a_requests_total", "a2a_store_operation_seconds_count")
    }


async def test_a_kept_answer_is_counted_as_the_engine_path_counts_it(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    """The call's count, and the store operations it stands for (the retry-key lookup
    and the load), move as for a retry answered by the engine."""
    gateway, channel = served
    await _send(channel, _request())
    await _send(channel, _request())  # kept
    before = _samples(gateway)
    await _send(channel, _request(), (*ALICE, ("x-other", "1")))  # the engine's path
    engine = _samples(gateway)
    await _send(channel, _request())  # the memo's
    memo = _samples(gateway)
    assert _memo(gateway).hits == 1
    by_engine = {k: engine.get(k, 0) - v for k, v in before.items() if engine.get(k, 0) != v}
    by_memo = {k: memo.get(k, 0) - v for k, v in engine.items() if memo.get(k, 0) != v}
    assert by_memo == by_engine
    operations = {dict(labels).get("operation") for name, labels in by_memo}
    assert operations == {None, "load", "lookup_message"}  # None: a2a_requests_total


@pytest.mark.parametrize(
    "settings", [{"access_log": True}, {"otlp_endpoint": "http://127.0.0.1:9"}], ids=str
)
async def test_no_memo_where_each_call_is_seen(tmp_path: Path, settings: dict[str, Any]) -> None:
    """An access log or tracing sees every call: no call is answered around them."""
    async with running_gateway(tmp_path, **settings) as gateway:
        assert gateway.retry_memo is None


def test_the_memo_is_bounded() -> None:
    memo = RetryMemo(lambda replay: lambda: True, max_entries=2, max_bytes=10_000)
    metadata = (("a2a-version", "1.0"),)
    for n in range(3):
        memo.keep((b"r%d" % n, metadata), ANONYMOUS, b"answer", object())
    assert len(memo) == 2
    assert memo.get((b"r0", metadata)) is None  # the oldest went
    kept = memo.get((b"r2", metadata))
    assert kept is not None and memo.answer(kept, ANONYMOUS) == b"answer"
    memo.keep((b"big", metadata), ANONYMOUS, b"x" * (MAX_ANSWER_BYTES + 1), object())
    assert memo.get((b"big", metadata)) is None
    refused = RetryMemo(lambda replay: lambda: False)
    refused.keep((b"r", metadata), ANONYMOUS, b"answer", object())
    kept = refused.get((b"r", metadata))
    assert kept is not None and refused.answer(kept, ANONYMOUS) is None
