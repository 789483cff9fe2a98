"""Request signing: the header format, the window, and enforcement on every binding
(the signature is checked before the service runs, and covers exactly the body)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from a2a_gateway.local import signing
from a2a_gateway.protocol.errors import UnauthenticatedError
from a2a_gateway.server.auth import WorkspaceCallers
from a2a_gateway.server.config import ServerConfig
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import EchoService
from tests.support.grpc_serving import grpc_serving

from .conftest import TIMEOUT_S, Http, Starter, text_message

SECRET = "sign-secret-6f1e2d3c4b5a6978"
KEY_SIGNED = "sign-key-signed-1a2b3c4d"
KEY_PLAIN = "sign-key-plain-5e6f7a8b"
NOW = 1_700_000_000


# --- the format ---------------------------------------------------------------------------


def test_sign_is_hmac_sha256_over_timestamp_dot_body() -> None:
    body = b'{"jsonrpc":"2.0"}'
    expected = hmac.new(SECRET.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signing.sign(SECRET, body, NOW) == expected
    assert signing.signature_header(SECRET, body, timestamp=NOW) == f"t={NOW},v1={expected}"


def test_a_good_signature_verifies() -> None:
    body = b"payload"
    header = signing.signature_header(SECRET, body, timestamp=NOW)
    signing.check(SECRET, header, body, now=NOW)
    signing.check(SECRET, header.upper().replace("T=", "t=").replace("V1=", "v1="), body, now=NOW)
    # Spaces, several v1 values (rotation), unknown schemes: all accepted.
    other = signing.sign("another-secret-123456", body, NOW)
    good = signing.sign(SECRET, body, NOW)
    signing.check(SECRET, f" t={NOW} , v0=abc, v1={other}, v1={good}", body, now=NOW)
    # Within the window either way.
    signing.check(SECRET, header, body, now=NOW + signing.TOLERANCE_S)
    signing.check(SECRET, header, body, now=NOW - signing.TOLERANCE_S)


@pytest.mark.parametrize(
    ("header", "why"),
    [
        (None, "required"),
        ("", "required"),
        ("v1=" + "0" * 64, "t is missing"),
        (f"t={NOW}", "v1 is missing"),
        (f"t={NOW},v1=xyz", "64 hex"),
        (f"t={NOW},v1={'0' * 63}", "64 hex"),
        (f"t=soon,v1={'0' * 64}", "Unix time"),
        (f"t=-5,v1={'0' * 64}", "Unix time"),
        (f"t={NOW},t={NOW},v1={'0' * 64}", "twice"),
        (f"t={NOW};v1={'0' * 64}", "Unix time"),
        (f"t{NOW},v1={'0' * 64}", "expected"),
        ("t=1," + ",".join(["v1=" + "0" * 64] * 9), "more than"),
        ("x" * 2000, "longer"),
    ],
)
def test_malformed_headers(header: str | None, why: str) -> None:
    with pytest.raises(UnauthenticatedError, match=why) as caught:
        signing.check(SECRET, header, b"body", now=NOW)
    assert "X-A2A-Signature" in caught.value.message
    assert SECRET not in caught.value.message


def test_stale_replayed_and_foreign_signatures_are_refused() -> None:
    body = b'{"a":1}'
    header = signing.signature_header(SECRET, body, timestamp=NOW)
    with pytest.raises(UnauthenticatedError, match="minutes away"):
        signing.check(SECRET, header, body, now=NOW + signing.TOLERANCE_S + 1)  # replay
    with pytest.raises(UnauthenticatedError, match="minutes away"):
        signing.check(SECRET, header, body, now=NOW - signing.TOLERANCE_S - 1)
    with pytest.raises(UnauthenticatedError, match="does not match") as caught:
        signing.check(SECRET, header, b'{"a":2}', now=NOW)  # another body
    expected = signing.sign(SECRET, b'{"a":2}', NOW)
    assert expected not in caught.value.message
    with pytest.raises(UnauthenticatedError, match="does not match"):
        signing.check("a-different-secret-99", header, body, now=NOW)
    with pytest.raises(UnauthenticatedError, match="does not match"):
        moved = header.replace(f"t={NOW}", f"t={NOW + 1}")  # timestamp is covered
        signing.check(SECRET, moved, body, now=NOW)


def test_pending_signature_never_shows_its_secret() -> None:
    pending = signing.PendingSignature(SECRET, signing.parse(f"t={NOW},v1={'a' * 64}", now=NOW))
    assert SECRET not in repr(pending) and not pending.verified


# --- HTTP ---------------------------------------------------------------------------------


#: The ``workspace`` of this module's tests: one caller signs, one does not.
pytestmark = pytest.mark.callers(
    {"name": "signer", "key": KEY_SIGNED, "signing_secret": SECRET},
    {"name": "plain", "key": KEY_PLAIN},
)


@pytest.fixture
async def http(start_http: Starter, workspace: Path) -> Http:
    return await start_http(
        config=ServerConfig(workspaces=[workspace], keepalive_interval_s=0.05),
        authenticator=WorkspaceCallers([workspace]),
    )


def signed_headers(body: bytes, *, timestamp: int | None = None, **extra: str) -> dict[str, str]:
    header = signing.signature_header(SECRET, body, timestamp=timestamp)
    return {"X-API-Key": KEY_SIGNED, "Content-Type": "application/json", **extra,
            "X-A2A-Signature": header}  # fmt: skip


async def request(http: Http, method: str, path: str, body: bytes | None, headers: Any) -> Any:
    async with asyncio.timeout(TIMEOUT_S):
        async with await http.client.request(method, path, data=body, headers=headers) as r:
            return r.status, await r.text()


def rpc_body(method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


async def test_jsonrpc_signed_requests(http: Http) -> None:
    body = rpc_body("SendMessage", text_message("hi"))
    assert (await request(http, "POST", "/a2a", body, signed_headers(body)))[0] == 200
    # The same request and signature again, within the window: the window is the
    # replay bound (the signature does not carry a nonce).
    headers = signed_headers(body)
    assert (await request(http, "POST", "/a2a", body, headers))[0] == 200
    calls = len(http.service.calls)
    other = rpc_body("SendMessage", text_message("bye"))
    refusals = [
        (body, {"X-API-Key": KEY_SIGNED}),  # unsigned
        (other, headers),  # signed for another body
        (body, signed_headers(body, timestamp=int(time.time()) - 301)),  # replayed later
        (body, {**headers, "X-A2A-Signature": "t=abc"}),  # malformed
    ]
    for sent, sent_headers in refusals:
        status, text = await request(http, "POST", "/a2a", sent, sent_headers)
        assert status == 401, text
        assert "X-A2A-Signature" in json.loads(text)["error"]["message"]
        assert SECRET not in text
    assert len(http.service.calls) == calls, "the service never ran for a bad signature"
    # A caller without a secret needs no signature.
    plain = {"X-API-Key": KEY_PLAIN, "Content-Type": "application/json"}
    assert (await request(http, "POST", "/a2a", body, plain))[0] == 200


async def test_jsonrpc_stream_is_checked_before_it_starts(http: Http) -> None:
    body = rpc_body("SendStreamingMessage", text_message("hi"))
    good = await request(http, "POST", "/a2a", body, signed_headers(body))
    assert good[0] == 200 and "data:" in good[1]
    bad = signed_headers(b"something else")
    assert (await request(http, "POST", "/a2a", body, bad))[0] == 401
    assert [n for n, *_ in http.service.calls] == ["send_streaming_message"]


async def test_rest_signed_requests(http: Http) -> None:
    body = json.dumps(text_message("hi")).encode()
    status, text = await request(http, "POST", "/a2a/v1/message:send", body, signed_headers(body))
    assert status == 200, text
    task_id = json.loads(text)["task"]["id"]
    # GET and DELETE have no body: the signature covers the empty body.
    for method, path in (("GET", f"/a2a/v1/tasks/{task_id}"), ("GET", "/a2a/v1/tasks")):
        assert (await request(http, method, path, None, signed_headers(b"")))[0] == 200
        assert (await request(http, method, path, None, signed_headers(b"x")))[0] == 401
        unsigned = {"X-API-Key": KEY_SIGNED}
        assert (await request(http, method, path, None, unsigned))[0] == 401
    # A body on a GET could not be covered: refused rather than ignored.
    refused = await request(http, "GET", "/a2a/v1/tasks", b"{}", signed_headers(b"{}"))
    assert refused[0] == 400
    # POST :subscribe (the body-less alias of the GET route) still checks its body.
    path = f"/a2a/v1/tasks/{task_id}:subscribe"
    assert (await request(http, "POST", path, b"{}", signed_headers(b"{}")))[0] == 200
    assert (await request(http, "POST", path, b"{}", signed_headers(b"[]")))[0] == 401
    cancel = f"/a2a/v1/tasks/{task_id}:cancel"
    assert (await request(http, "POST", cancel, b"{}", signed_headers(b"{ }")))[0] == 401
    assert (await request(http, "POST", cancel, b"{}", signed_headers(b"{}")))[0] == 200
    names = [name for name, *_ in http.service.calls]
    assert names == ["send_message", "get_task", "list_tasks", "subscribe_to_task", "cancel_task"]


async def test_rest_stream_signature_is_checked_before_the_service_is_called(
    http: Http, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A service may start work when its streaming method is called (not only on the
    # first event): the pending signature must be checked before that call.
    invoked: list[str] = []
    original = http.service.subscribe_to_task

    def subscribe(request: Any, context: Any) -> Any:
        invoked.append(request.id)
        return original(request, context)

    monkeypatch.setattr(http.service, "subscribe_to_task", subscribe)
    path = "/a2a/v1/tasks/task-x:subscribe"
    assert (await request(http, "POST", path, b"{}", signed_headers(b"[]")))[0] == 401
    assert invoked == []
    status, _ = await request(http, "POST", path, b"{}", signed_headers(b"{}"))
    assert status == 404 and invoked == ["task-x"]  # admitted; the task is unknown


# --- gRPC ---------------------------------------------------------------------------------


@pytest.fixture
async def grpc_signed(workspace: Path) -> AsyncIterator[tuple[EchoService, grpc.aio.Channel]]:
    service = EchoService(stateless=True)
    async with grpc_serving(service, WorkspaceCallers([workspace])) as served:
        yield service, served.channel


async def test_grpc_signature_covers_the_serialized_request(
    grpc_signed: tuple[EchoService, grpc.aio.Channel],
) -> None:
    service, channel = grpc_signed
    raw = channel.unary_unary("/lf.a2a.v1.A2AService/GetTask", lambda b: b, lambda b: b)
    stream = channel.unary_stream(
        "/lf.a2a.v1.A2AService/SubscribeToTask", lambda b: b, pb.StreamResponse.FromString
    )
    request = pb.GetTaskRequest(id="task-1").SerializeToString()
    base = (("a2a-version", "1.0"), ("x-api-key", KEY_SIGNED))

    def sig(body: bytes, timestamp: int | None = None) -> tuple[tuple[str, str], ...]:
        header = signing.signature_header(SECRET, body, timestamp=timestamp)
        return (*base, ("x-a2a-signature", header))

    async with asyncio.timeout(TIMEOUT_S):
        assert pb.Task.FromString(await raw(request, metadata=sig(request))).id == "task-1"
        subscribe = pb.SubscribeToTaskRequest(id="task-2").SerializeToString()
        events = [e async for e in stream(subscribe, metadata=sig(subscribe))]
        assert events[0].task.id == "task-2"
        bad = [
            base,
            sig(pb.GetTaskRequest(id="task-2").SerializeToString()),
            sig(request, int(time.time()) - 400),
            (*base, ("x-a2a-signature", "t=1,v1=nothex")),
        ]
        for metadata in bad:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await raw(request, metadata=metadata)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "X-A2A-Signature" in (caught.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stream(subscribe, metadata=base):
                pass
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert len(service.contexts) == 2
