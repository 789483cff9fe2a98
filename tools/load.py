"""The in-repo load the benchmark tools share: a free port, waiting for a card, and
blocking sends at a concurrency (JSON-RPC, HTTP+JSON or gRPC), each answer checked."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
import uuid

import aiohttp
import grpc

from lf.a2a.v1 import a2a_pb2 as pb


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(url: str, timeout_s: float = 10.0) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(int(timeout_s / 0.05)):
            try:
                async with http.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise SystemExit(f"the gateway did not answer at {url}")


def _message(message_id: str | None = None) -> dict[str, object]:
    message_id = message_id or uuid.uuid4().hex
    return {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": "hi"}]}


def _next_id(message_id: str | None, id_prefix: str | None, number: int) -> str | None:
    """The messageId of send ``number``: ``message_id`` every time, or ``<id_prefix>-<n>``
    (the same sequence each time the prefix is given again), or None (a new one)."""
    return message_id if id_prefix is None else f"{id_prefix}-{number}"


async def sends(
    url: str,
    headers: dict[str, str],
    count: int,
    concurrency: int,
    *,
    rest: bool = False,
    message_id: str | None = None,
    id_prefix: str | None = None,
) -> float:
    """Blocking sends/s: ``count`` SendMessage calls, ``concurrency`` at a time, each
    with a new messageId (or ``message_id`` every time: after the first, retries answered
    from the stored task, as the side-by-side bench's gRPC sends; or ``<id_prefix>-<n>``
    for the n-th: given again, the same ids, retries of the first run's sends, as the
    side-by-side bench's JSON-RPC and HTTP+JSON sends after its first warm-up); every
    answer must be a completed task."""
    counter = itertools.count()
    headers = {**headers, "A2A-Version": "1.0", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            while (number := next(counter)) < count:
                params = {"message": _message(_next_id(message_id, id_prefix, number))}
                body = (
                    params
                    if rest
                    else {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
                )
                async with http.post(url, data=json.dumps(body), headers=headers) as response:
                    answer = await response.json(content_type=None)
                    task = answer["task"] if rest else answer["result"]["task"]
                    assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)


async def stream_events(
    url: str, headers: dict[str, str], count: int, chunks: int, concurrency: int
) -> tuple[float, int]:
    """(stream events/s, events): ``count`` JSON-RPC SendStreamingMessage calls of the faux
    agent's ``chunks:<chunks>``, ``concurrency`` at a time; every stream must end completed."""
    counter = itertools.count()
    events = 0
    headers = {**headers, "A2A-Version": "1.0", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            nonlocal events
            while next(counter) < count:
                message = {**_message(), "parts": [{"text": f"chunks:{chunks}"}]}
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendStreamingMessage",
                    "params": {"message": message},
                }
                async with http.post(url, data=json.dumps(body), headers=headers) as response:
                    data = await response.read()
                lines = [line for line in data.split(b"\n") if line.startswith(b"data:")]
                assert b"TASK_STATE_COMPLETED" in lines[-1], data[-300:]
                events += len(lines)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return events / (time.perf_counter() - started), events


async def grpc_sends(
    target: str, count: int, concurrency: int, *, message_id: str | None = None
) -> float:
    """Blocking gRPC sends/s: ``count`` unary ``SendMessage`` calls on one channel to
    ``target`` (``host:port``), ``concurrency`` at a time, each with a new messageId (or
    ``message_id`` every time, as :func:`sends`); every answer must be a completed task."""

    counter = itertools.count()
    metadata = (("a2a-version", "1.0"),)
    completed = pb.TaskState.TASK_STATE_COMPLETED
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(
            "/lf.a2a.v1.A2AService/SendMessage",
            request_serializer=pb.SendMessageRequest.SerializeToString,
            response_deserializer=pb.SendMessageResponse.FromString,
        )

        async def worker() -> None:
            while next(counter) < count:
                message = pb.Message(
                    role=pb.Role.ROLE_USER,
                    message_id=message_id or uuid.uuid4().hex,
                    parts=[pb.Part(text="hi")],
                )
                answer = await call(pb.SendMessageRequest(message=message), metadata=metadata)
                assert answer.task.status.state == completed, answer

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)
