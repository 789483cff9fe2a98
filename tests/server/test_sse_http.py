"""SSE on both HTTP bindings: framing, pre-stream and mid-stream errors, keep-alives,
and closing the service's stream when the client goes away."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from a2a_gateway.protocol import sse
from a2a_gateway.server.config import ServerConfig

from .conftest import TIMEOUT_S, Http, Starter, text_message

BINDINGS = ("jsonrpc", "rest")


@dataclass
class Streamed:
    status: int
    content_type: str
    raw: bytes
    events: list[sse.Event]

    def payloads(self) -> list[Any]:
        return [json.loads(event.data) for event in self.events]


async def open_stream(
    http: Http, binding: str, rpc: str, params: dict[str, Any], path: str = ""
) -> aiohttp.ClientResponse:
    if binding == "jsonrpc":
        body = {"jsonrpc": "2.0", "id": "s-1", "method": rpc, "params": params}
        return await http.client.post("/a2a", json=body, headers={"Accept": "text/event-stream"})
    return await http.client.post(
        "/a2a/v1" + path, json=params, headers={"Accept": "text/event-stream"}
    )


async def stream(
    http: Http, binding: str, params: dict[str, Any], rpc: str = "SendStreamingMessage"
) -> Streamed:
    path = (
        "/message:stream" if rpc == "SendStreamingMessage" else f"/tasks/{params['id']}:subscribe"
    )
    async with asyncio.timeout(TIMEOUT_S):
        response = await open_stream(http, binding, rpc, params, path)
        async with response:
            raw = await response.read()
    decoder = sse.Decoder()
    return Streamed(response.status, response.content_type, raw, list(decoder.feed(raw)))


def results(binding: str, streamed: Streamed) -> list[dict[str, Any]]:
    """The StreamResponse of each event, whatever the binding's wrapping."""
    out = []
    for payload in streamed.payloads():
        if binding == "jsonrpc":
            assert payload["jsonrpc"] == "2.0" and payload["id"] == "s-1"
            out.append(payload["result"])
        else:
            assert "jsonrpc" not in payload
            out.append(payload)
    return out


@pytest.mark.parametrize("binding", BINDINGS)
async def test_stream_framing(http: Http, binding: str) -> None:
    streamed = await stream(http, binding, text_message("go", chunks=3))
    assert streamed.status == 200
    assert streamed.content_type == "text/event-stream"
    events = results(binding, streamed)
    assert list(events[0]) == ["task"]
    assert events[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert [e["artifactUpdate"]["artifact"]["parts"][0]["text"] for e in events[1:4]] == [
        "chunk 0",
        "chunk 1",
        "chunk 2",
    ]
    assert events[2]["artifactUpdate"]["append"] is True
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all(event.event == "message" for event in streamed.events)
    # One compact data line per event, blank-line separated.
    frames = streamed.raw.decode().split("\n\n")
    data_frames = [f for f in frames if f.startswith("data: ")]
    assert len(data_frames) == len(events)
    assert all("\n" not in frame for frame in data_frames)
    assert http.service.stream_closed.is_set()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_subscribe(http: Http, binding: str) -> None:
    _, sent = await http.rpc("SendMessage", text_message("x"))
    task_id = sent["result"]["task"]["id"]
    streamed = await stream(http, binding, {"id": task_id}, rpc="SubscribeToTask")
    events = results(binding, streamed)
    assert events[0]["task"]["id"] == task_id
    assert events[1]["statusUpdate"]["taskId"] == task_id


async def test_rest_subscribe_by_get_and_bodyless_post(http: Http) -> None:
    _, sent = await http.rpc("SendMessage", text_message("x"))
    task_id = sent["result"]["task"]["id"]
    for method in ("GET", "POST"):
        async with asyncio.timeout(TIMEOUT_S):
            response = await http.client.request(method, f"/a2a/v1/acme/tasks/{task_id}:subscribe")
            raw = await response.read()
        assert response.content_type == "text/event-stream"
        events = [json.loads(e.data) for e in sse.Decoder().feed(raw)]
        assert events[0]["task"]["id"] == task_id
        assert http.service.last[2].tenant == "acme"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_pre_stream_error_is_plain_json(http: Http, binding: str) -> None:
    streamed = await stream(http, binding, {"id": "missing"}, rpc="SubscribeToTask")
    if binding == "jsonrpc":
        assert (streamed.status, streamed.content_type) == (200, "application/json")
        body = json.loads(streamed.raw)
        assert body["id"] == "s-1"
        assert body["error"]["code"] == -32001
    else:
        assert (streamed.status, streamed.content_type) == (404, "application/a2a+json")
        body = json.loads(streamed.raw)
        assert body["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_invalid_stream_params_are_plain_json(http: Http, binding: str) -> None:
    streamed = await stream(http, binding, {"message": {"messageId": "m"}})
    assert streamed.content_type != "text/event-stream"
    body = json.loads(streamed.raw)
    if binding == "jsonrpc":
        assert body["error"]["code"] == -32602
    else:
        assert streamed.status == 400


@pytest.mark.parametrize("binding", BINDINGS)
async def test_mid_stream_error_is_an_error_event_then_close(http: Http, binding: str) -> None:
    streamed = await stream(http, binding, text_message("x", fail="TASK_NOT_CANCELABLE"))
    assert streamed.status == 200 and streamed.content_type == "text/event-stream"
    assert [e.event for e in streamed.events] == ["message", "error"]
    error = json.loads(streamed.events[-1].data)
    if binding == "jsonrpc":
        assert error["jsonrpc"] == "2.0" and error["id"] == "s-1"
        assert error["error"]["code"] == -32002
        assert error["error"]["data"][0]["reason"] == "TASK_NOT_CANCELABLE"
    else:
        assert error["error"]["code"] == 400
        assert error["error"]["status"] == "FAILED_PRECONDITION"
        assert error["error"]["details"][0]["reason"] == "TASK_NOT_CANCELABLE"
    assert http.service.stream_closed.is_set()


@pytest.mark.server_fault
@pytest.mark.parametrize("binding", BINDINGS)
async def test_mid_stream_crash_is_a_generic_internal_error(http: Http, binding: str) -> None:
    streamed = await stream(http, binding, text_message("x", crash=True))
    assert b"secret" not in streamed.raw and b"Traceback" not in streamed.raw
    error = json.loads(streamed.events[-1].data)["error"]
    assert streamed.events[-1].event == "error"
    assert error["message"] == "Internal error"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_keepalive_comments_while_idle(http: Http, binding: str) -> None:
    # The fixture's keep-alive interval is 0.05 s; the service idles 0.4 s mid-stream.
    streamed = await stream(http, binding, text_message("x", idle=0.4, chunks=1))
    assert b": keep-alive\n\n" in streamed.raw
    assert len(streamed.events) == 3  # comments are not events
    first_comment = streamed.raw.index(b": keep-alive")
    assert streamed.raw.index(b"data: ") < first_comment


async def test_no_keepalive_on_a_busy_stream(start_http: Starter) -> None:
    http = await start_http(config=ServerConfig(keepalive_interval_s=30))
    streamed = await stream(http, "rest", text_message("x", chunks=5))
    assert b"keep-alive" not in streamed.raw
    assert len(streamed.events) == 7


@pytest.mark.parametrize("keepalive_s", [0.05, 60.0])
@pytest.mark.parametrize("binding", BINDINGS)
async def test_client_disconnect_closes_the_service_stream(
    start_http: Starter, binding: str, keepalive_s: float
) -> None:
    # With a 60 s keep-alive no write can notice the disconnect: the binding must.
    http = await start_http(config=ServerConfig(keepalive_interval_s=keepalive_s))
    async with asyncio.timeout(TIMEOUT_S):
        response = await open_stream(
            http, binding, "SendStreamingMessage", text_message("x", hang=True), "/message:stream"
        )
        decoder = sse.Decoder()
        first: list[sse.Event] = []
        while not first:
            chunk = await response.content.readany()
            assert chunk, "stream ended early"
            first = list(decoder.feed(chunk))
        assert http.service.stream_started.is_set()
        assert not http.service.stream_closed.is_set()
        response.close()  # drop the connection mid-stream
        await http.service.stream_closed.wait()
