"""Hop counts across implementations: our client and ``serve --upstream`` write the count
under both ``a2a-gateway.hops`` and the seed's ``volcanic.hops``, and read either. The
upstream is a real HTTP app (JSON-RPC and HTTP+JSON) whose service records every request
it receives."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.protobuf import json_format

import lf.a2a.v1.a2a_pb2 as pb
from a2a_gateway.client import connect
from a2a_gateway.client.messages import send_request
from a2a_gateway.protocol.context import CallContext, Caller
from a2a_gateway.protocol.errors import InternalError
from a2a_gateway.proxy import UpstreamProxy

from ..server.conftest import Http, Starter, start_http  # noqa: F401 (fixture)

OURS, THEIRS = "a2a-gateway.hops", "volcanic.hops"
BOUND_S = 20.0


def _request(metadata: dict[str, Any] | None, message_metadata: dict[str, Any] | None) -> Any:
    value: dict[str, Any] = {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    }
    if metadata is not None:
        value["metadata"] = metadata
    if message_metadata is not None:
        value["message"]["metadata"] = message_metadata
    return json_format.ParseDict(value, pb.SendMessageRequest())


def _received_hops(upstream: Http) -> dict[str, Any]:
    name, request, _ = upstream.service.last
    assert name == "send_message"
    assert isinstance(request, pb.SendMessageRequest)
    metadata = json_format.MessageToDict(request.metadata)
    return {key: metadata[key] for key in (OURS, THEIRS) if key in metadata}


#: (request metadata, message metadata, the count the peer must receive under both keys)
CLIENT_CASES: list[tuple[dict[str, Any] | None, dict[str, Any] | None, int | None]] = [
    (None, None, None),  # the client invents no count
    ({OURS: 2}, None, 2),
    ({THEIRS: 2}, None, 2),
    (None, {THEIRS: 1}, 1),
    ({OURS: 1, THEIRS: 3}, None, 3),
]


@pytest.mark.parametrize("transport", ["jsonrpc", "rest"])
@pytest.mark.parametrize(("metadata", "message_metadata", "sent"), CLIENT_CASES)
async def test_the_client_writes_a_hop_count_under_both_keys(
    start_http: Starter,  # noqa: F811
    transport: str,
    metadata: dict[str, Any] | None,
    message_metadata: dict[str, Any] | None,
    sent: int | None,
) -> None:
    upstream = await start_http()
    async with asyncio.timeout(BOUND_S):
        agent = await connect(upstream.base, transport=transport)
        async with agent:
            await agent.send_message(_request(metadata, message_metadata))
            expected = {} if sent is None else {OURS: sent, THEIRS: sent}
            assert _received_hops(upstream) == expected
            await agent.send_message(send_request("onwards", hops=4))
            assert _received_hops(upstream) == {OURS: 4, THEIRS: 4}


#: (request metadata, message metadata, what the proxy sends on: a count, or refused)
PROXY_CASES: list[tuple[dict[str, Any] | None, dict[str, Any] | None, int | None]] = [
    (None, None, 1),
    ({OURS: 1}, None, 2),
    ({THEIRS: 1}, None, 2),
    (None, {THEIRS: 2}, 3),
    ({OURS: 0, THEIRS: 2}, None, 3),
    ({THEIRS: 3}, None, None),  # 4 > max_hops (3): a loop through a volcanic peer stops
    (None, {THEIRS: 3}, None),
    ({OURS: 3, THEIRS: 0}, None, None),
]


@pytest.mark.parametrize(("metadata", "message_metadata", "forwarded"), PROXY_CASES)
async def test_the_proxy_reads_either_key_and_writes_both(
    start_http: Starter,  # noqa: F811
    metadata: dict[str, Any] | None,
    message_metadata: dict[str, Any] | None,
    forwarded: int | None,
) -> None:
    upstream = await start_http()
    proxy = UpstreamProxy(upstream.base, transport="jsonrpc", max_hops=3)
    context = CallContext(caller=Caller(name="alice", workspace="/ws"))
    try:
        async with asyncio.timeout(BOUND_S):
            request = _request(metadata, message_metadata)
            if forwarded is None:
                with pytest.raises(InternalError, match="too many gateways"):
                    await proxy.send_message(request, context)
                assert not [c for c in upstream.service.calls if c[0] == "send_message"]
            else:
                await proxy.send_message(request, context)
                assert _received_hops(upstream) == {OURS: forwarded, THEIRS: forwarded}
    finally:
        await proxy.aclose()
