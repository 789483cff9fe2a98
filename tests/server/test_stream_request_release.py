"""An HTTP stream does not keep its request alive: once the service has the request,
nothing in the bindings references the parsed body (JSON dicts) or the request message.

A SendStreamingMessage may carry megabytes of inline file bytes and its stream may last
long. A real app serves a service that keeps only the message id and waits; while its
stream is open, the garbage collector must find no object holding that message.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import io
import json
from typing import Any

import pytest
from aiohttp import web

from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import HoldingService

from .conftest import TIMEOUT_S, Http, Starter

BIG = 1024 * 1024  # bytes in the request's file part


def _file_bytes(marker: str) -> str:
    return base64.b64encode(marker.encode() * (BIG // len(marker))).decode()


def _body(binding: str, version: str, marker: str) -> tuple[str, bytes]:
    """(path, encoded body) of a streaming send whose message id is ``marker``.

    Encoded here so that the test itself keeps no dict of the message alive.
    """
    if version == "0.3":
        if binding == "jsonrpc":
            file03 = {"kind": "file", "file": {"bytes": _file_bytes(marker)}}
            message03 = {"kind": "message", "messageId": marker, "role": "user", "parts": [file03]}
            envelope = {"jsonrpc": "2.0", "id": 3, "method": "message/stream"}
            return "/a2a", json.dumps({**envelope, "params": {"message": message03}}).encode()
        request03 = {"message_id": marker, "role": "ROLE_USER", "content": [{"text": "x" * BIG}]}
        return "/a2a/v1/v1/message:stream", json.dumps({"request": request03}).encode()
    part = {"raw": _file_bytes(marker), "mediaType": "application/octet-stream"}
    params = {"message": {"messageId": marker, "role": "ROLE_USER", "parts": [part]}}
    if binding == "jsonrpc":
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
        return "/a2a", json.dumps({**envelope, "params": params}).encode()
    return "/a2a/v1/message:stream", json.dumps(params).encode()


def _holds(found: Any, marker: str) -> bool:
    if isinstance(found, pb.SendMessageRequest):
        return found.message.message_id == marker
    if isinstance(found, pb.Message):
        return found.message_id == marker
    if isinstance(found, dict):  # the decoded JSON of the body, at any depth
        return marker in (found.get("messageId"), found.get("message_id"))
    return False


def _live(marker: str) -> list[str]:
    """The types of the live objects that hold the message ``marker``."""
    gc.collect()
    return [type(found).__name__ for found in gc.get_objects() if _holds(found, marker)]


def test_the_probe_sees_a_live_request() -> None:
    # The check below is not vacuous: a live request and its JSON are found.
    kept = pb.SendMessageRequest(message=pb.Message(message_id="m-probe"))
    as_json = {"message": {"messageId": "m-probe", "parts": [{"text": "x"}]}}
    assert sorted(_live("m-probe")) == ["SendMessageRequest", "dict"]
    del kept, as_json
    assert _live("m-probe") == []


@pytest.mark.parametrize("version", ["1.0", "0.3"])
@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
async def test_an_open_stream_does_not_keep_its_request(
    start_http: Starter, binding: str, version: str
) -> None:
    service = HoldingService()
    http: Http = await start_http(service=service)
    marker = f"m-held-{binding}-{version}"
    path, data = _body(binding, version, marker)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    async with asyncio.timeout(TIMEOUT_S):
        # A file object: aiohttp warns that large bytes would block the loop.
        response = await http.client.post(path, data=io.BytesIO(data), headers=headers)
    del data
    async with response:
        try:
            assert response.status == 200, await response.text()
            assert response.content_type == "text/event-stream"
            async with asyncio.timeout(TIMEOUT_S):
                first = await response.content.readuntil(b"\n\n")
                await service.started.wait()
            assert marker.encode() in first  # the stream is open and serving
            assert _live(marker) == []
            # Nor its body reader's buffer (read to its end: an immutable empty one).
            served = [found for found in gc.get_objects() if isinstance(found, web.BaseRequest)]
            assert [found._cache for found in served] == [{}]  # nor its computed properties
            # Nor the response its header map (sent already: the client has them).
            streams = [found for found in gc.get_objects() if type(found) is web.StreamResponse]
            assert [len(found.headers) for found in streams] == [0]
            assert [type(found.content._buffer) for found in served] == [tuple]
        finally:
            service.release.set()
        async with asyncio.timeout(TIMEOUT_S):
            await response.read()  # the stream ends once the service returns


async def test_a_request_pipelined_behind_a_held_stream_is_served_after_it(
    start_http: Starter,
) -> None:
    """While a stream is held its connection queues pipelined requests without
    aiohttp's deque (released for the stream's life); one sent behind the stream is
    queued there and answered, in order, once the stream ends."""
    service = HoldingService()
    http: Http = await start_http(service=service)
    server = http.client.server
    message = {"messageId": "m-pipelined", "role": "ROLE_USER", "parts": [{"text": "x"}]}
    envelope = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
    body = json.dumps({**envelope, "params": {"message": message}}).encode()
    head = (
        "POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    async with asyncio.timeout(TIMEOUT_S):
        reader, writer = await asyncio.open_connection(server.host, server.port)
        try:
            writer.write(head.encode() + body)
            first = await reader.readuntil(b"m-pipelined")
            await service.started.wait()
            assert first.startswith(b"HTTP/1.1 200")
            served = [found for found in gc.get_objects() if isinstance(found, web.BaseRequest)]
            queues = [found.protocol._messages for found in served]
            assert [type(queue).__name__ for queue in queues] == ["_Pipelined"]
            writer.write(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n")
            writer.write(b"Connection: close\r\n\r\n")
            await writer.drain()
            # aiohttp's parser tells nothing when it queues: look until it has.
            while not queues[0]:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            service.release.set()
            rest = await reader.read()  # to the end: the card answer closes it
        finally:
            writer.close()
    stream_end = rest.index(b"\r\n0\r\n\r\n")  # the stream's last chunk, then the card
    card = rest[stream_end + 7 :]
    assert card.startswith(b"HTTP/1.1 200"), card[:200]
    assert b'"supportedInterfaces"' in card
