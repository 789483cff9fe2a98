"""Authentication: presented credentials, callers.json parsing and freshness, and the
credential edge cases over real HTTP and gRPC servers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from a2a_gateway.protocol.context import ANONYMOUS, Caller
from a2a_gateway.protocol.errors import UnauthenticatedError
from a2a_gateway.server.auth import (
    CALLERS_FILE,
    AllowAnonymous,
    Authenticator,
    CallerPolicy,
    Identity,
    WorkspaceCallers,
    presented_key,
    read_callers,
    single_values,
)
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.limits import CallerLimits
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import EchoService
from tests.support.grpc_serving import grpc_serving
from tests.support.workspace import write_callers

from .conftest import TIMEOUT_S, Starter

KEY_A = "auth-key-a-5c0e7f1d9b"
KEY_B = "auth-key-b-8e2d4a6c1f"
SECRET_IN_BAD_ENTRY = "bad-entry-key-3f8a1c"
SIGNING = "auth-signing-secret-0a9b8c7d6e"


def headers(**values: str) -> Any:
    lowered = {k.lower().replace("_", "-"): v for k, v in values.items()}
    return lambda name: lowered.get(name.lower())


def make_old(path: Path) -> None:
    """Age a file so the stat cache trusts it (a fresh file is re-read every time)."""
    old = path.stat().st_mtime - 60
    os.utime(path, (old, old))


def identified(authenticator: Authenticator, get: Any) -> Identity:
    """The identity for these headers, from a synchronous test."""
    return asyncio.run(authenticator.identify(get))


def admitted(callers: WorkspaceCallers, key: str) -> Caller:
    return identified(callers, headers(x_api_key=key)).caller


def refused(callers: WorkspaceCallers, key: str) -> str:
    with pytest.raises(UnauthenticatedError) as caught:
        admitted(callers, key)
    return caught.value.message


# --- presented credentials ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ({}, None),
        ({"x_api_key": KEY_A}, KEY_A),
        ({"authorization": f"Bearer {KEY_A}"}, KEY_A),
        ({"authorization": f"bearer {KEY_A}"}, KEY_A),
        ({"x_api_key": KEY_A, "authorization": f"Bearer {KEY_A}"}, KEY_A),
        ({"x_api_key": ""}, ""),
        ({"authorization": "Bearer"}, ""),
    ],
)
def test_presented_key(sent: dict[str, str], expected: str | None) -> None:
    assert presented_key(headers(**sent)) == expected


@pytest.mark.parametrize(
    "sent",
    [
        {"authorization": f"Basic {KEY_A}"},
        {"authorization": KEY_A},
        {"x_api_key": KEY_A, "authorization": f"Bearer {KEY_B}"},
        {"x_api_key": "k" * 20000},
    ],
)
def test_malformed_or_ambiguous_credentials_are_refused(sent: dict[str, str]) -> None:
    with pytest.raises(UnauthenticatedError) as caught:
        presented_key(headers(**sent))
    assert KEY_A not in caught.value.message and KEY_B not in caught.value.message


def test_a_credential_header_sent_twice_is_refused() -> None:
    get = single_values(lambda name: [KEY_A, KEY_B] if name == "X-API-Key" else [])
    with pytest.raises(UnauthenticatedError, match="X-API-Key must be sent once"):
        presented_key(get)
    assert single_values(lambda name: [])("X-API-Key") is None


# --- callers.json ------------------------------------------------------------------------


def test_valid_callers_and_every_bad_entry_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad: list[Any] = [
        "not an object",
        {"name": "Bad_Name", "key": SECRET_IN_BAD_ENTRY},
        {"name": "no-key"},
        {"name": "empty-key", "key": ""},
        {"name": "spaced", "key": f" {SECRET_IN_BAD_ENTRY}"},
        {"name": "inner-space", "key": "two words-12345"},
        {"name": "int-key", "key": 12345678},
        {"name": "bad-hash", "key": "sha256:abc"},
        {"name": "bad-mode", "key": SECRET_IN_BAD_ENTRY + "m", "mode": "shared"},
        {"name": "typo", "key": SECRET_IN_BAD_ENTRY + "t", "signing_secrt": "x" * 20},
        {"name": "bad-limit", "key": SECRET_IN_BAD_ENTRY + "l", "max_running_tasks": -1},
        {"name": "bool-limit", "key": SECRET_IN_BAD_ENTRY + "b", "rate_limit_per_minute": True},
        {"name": "short-secret", "key": SECRET_IN_BAD_ENTRY + "s", "signing_secret": "short"},
        {"name": "note-type", "key": SECRET_IN_BAD_ENTRY + "n", "note": 5},
        {"name": "bad-delegate", "key": SECRET_IN_BAD_ENTRY + "g", "delegate": "yes"},
        {"name": "alice", "key": SECRET_IN_BAD_ENTRY + "d"},  # duplicate name (second)
    ]
    entries = [{"name": "alice", "key": KEY_A, "mode": "isolated", "note": "Alice"}, *bad]
    entries.append(
        {
            "name": "hashed",
            "key": "sha256:" + hashlib.sha256(KEY_B.encode()).hexdigest(),
            "delegate": True,
        }
    )
    write_callers(tmp_path, entries)
    callers = WorkspaceCallers([tmp_path])
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.server.auth"):
        assert admitted(callers, KEY_A) == Caller("alice", str(tmp_path))
        assert admitted(callers, KEY_B) == Caller("hashed", str(tmp_path))
        # "delegate" rides on the caller (not part of its identity): opt-in per entry.
        assert admitted(callers, KEY_B).delegate and not admitted(callers, KEY_A).delegate
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == len(bad)
    for warning in warnings:
        assert str(tmp_path / CALLERS_FILE) in warning
        assert SECRET_IN_BAD_ENTRY not in warning
    assert any("entry 2" in w and "name must match" in w for w in warnings)
    assert any("'typo'" in w and "unknown field 'signing_secrt'" in w for w in warnings)
    assert any("'alice'" in w and "duplicate name" in w for w in warnings)
    assert any("'bad-mode'" in w and "unknown mode" in w for w in warnings)
    assert any("'bad-delegate'" in w and "delegate must be true or false" in w for w in warnings)
    for suffix in ("", "m", "t", "l", "b", "s", "n", "g", "d"):
        refused(callers, SECRET_IN_BAD_ENTRY + suffix)


@pytest.mark.parametrize(
    "content",
    ["{not json", "", '{"name": "alice", "key": "auth-key-a-5c0e7f1d9b"}', '"text"', "null"],
)
def test_malformed_file_means_no_callers_and_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    path = write_callers(tmp_path, content)
    callers = WorkspaceCallers([tmp_path])
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.server.auth"):
        refused(callers, KEY_A)
        refused(callers, KEY_A)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1, "warned once per version of the file, not per request"
    assert str(path) in messages[0] and "no callers loaded" in messages[0]
    assert KEY_A not in messages[0]


def test_missing_file_and_folder_mean_no_callers(tmp_path: Path) -> None:
    callers = WorkspaceCallers([tmp_path / "absent"])
    assert "not valid" in refused(callers, KEY_A)


def test_an_edit_applies_to_the_very_next_request(tmp_path: Path) -> None:
    path = write_callers(tmp_path, [{"name": "alice", "key": KEY_A}])
    callers = WorkspaceCallers([tmp_path])
    assert admitted(callers, KEY_A).name == "alice"
    # In place, same size, immediately: the stat may not change at all.
    path.write_text(json.dumps([{"name": "alice", "key": KEY_B}]))
    refused(callers, KEY_A)
    assert admitted(callers, KEY_B).name == "alice"
    # Atomic replace by rename (what editors and `callers add` do).
    temp = path.with_name("new.json")
    temp.write_text(json.dumps([{"name": "bob", "key": KEY_A}]))
    os.replace(temp, path)
    assert admitted(callers, KEY_A).name == "bob"
    refused(callers, KEY_B)
    path.unlink()
    refused(callers, KEY_A)


def test_an_old_unchanged_file_is_served_from_the_cache(tmp_path: Path) -> None:
    path = write_callers(tmp_path, [{"name": "alice", "key": KEY_A}])
    make_old(path)
    callers = WorkspaceCallers([tmp_path])
    assert admitted(callers, KEY_A).name == "alice"
    with open(path, "r+b") as handle:  # same size, same (restored) mtime, new content
        stamp = path.stat()
        handle.write(json.dumps([{"name": "alice", "key": KEY_B}]).encode())
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    # ctime moved, so even a write that keeps size and mtime is noticed.
    assert admitted(callers, KEY_B).name == "alice"


def test_duplicate_key_in_one_file_is_refused_with_an_owner_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_callers(tmp_path, [{"name": "alice", "key": KEY_A}, {"name": "bob", "key": KEY_A}])
    callers = WorkspaceCallers([tmp_path])
    with caplog.at_level(logging.WARNING, logger="a2a_gateway.server.auth"):
        refused(callers, KEY_A)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "matches 2 callers (owners: " in message
    assert f"alice@{tmp_path}" in message and f"bob@{tmp_path}" in message
    assert KEY_A not in message


def test_same_key_in_two_workspaces_is_refused(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write_callers(one, [{"name": "alice", "key": KEY_A}])
    write_callers(two, [{"name": "alice", "key": KEY_A}, {"name": "bob", "key": KEY_B}])
    callers = WorkspaceCallers([one, two])
    refused(callers, KEY_A)
    assert admitted(callers, KEY_B) == Caller("bob", str(two))


def test_the_same_name_in_two_workspaces_is_two_callers(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write_callers(one, [{"name": "alice", "key": KEY_A}])
    write_callers(two, [{"name": "alice", "key": KEY_B}])
    callers = WorkspaceCallers([one, two])
    assert admitted(callers, KEY_A) != admitted(callers, KEY_B)


@pytest.mark.parametrize("key", [f" {KEY_A}", f"{KEY_A} ", KEY_A.upper(), KEY_A[:-1], "\udcff"])
def test_near_misses_do_not_match(tmp_path: Path, key: str) -> None:
    write_callers(tmp_path, [{"name": "alice", "key": KEY_A}])
    refused(WorkspaceCallers([tmp_path]), key)


def test_anonymous_access_only_without_any_key(tmp_path: Path) -> None:
    write_callers(tmp_path, [{"name": "alice", "key": KEY_A}])
    callers = WorkspaceCallers([tmp_path], allow_anonymous=True)
    assert identified(callers, headers()).caller == ANONYMOUS
    assert admitted(callers, KEY_A).name == "alice"
    refused(callers, "")
    refused(callers, KEY_B)
    assert identified(AllowAnonymous(), headers(x_api_key=KEY_A)) == Identity(ANONYMOUS)


def test_policy_limits_and_signing_secret(tmp_path: Path) -> None:
    write_callers(
        tmp_path,
        [
            {
                "name": "alice",
                "key": KEY_A,
                "rate_limit_per_minute": 30,
                "max_running_tasks": 2,
                "max_open_contexts": 0,
                "signing_secret": SIGNING,
            },
            {"name": "bob", "key": KEY_B},
        ],
    )
    callers = WorkspaceCallers([tmp_path])
    alice = identified(callers, headers(authorization=f"Bearer {KEY_A}"))
    assert alice.policy == CallerPolicy(CallerLimits(30, 2, 0), SIGNING)
    assert SIGNING not in repr(alice) and KEY_A not in repr(callers.entries())
    assert identified(callers, headers(x_api_key=KEY_B)).policy == CallerPolicy()
    assert callers.limits_for(alice.caller) == CallerLimits(30, 2, 0)
    assert callers.limits_for(Caller("nobody", str(tmp_path))) == CallerLimits()


# --- over the wire ------------------------------------------------------------------------


#: The ``workspace`` of this module's tests: alice may call it.
pytestmark = pytest.mark.callers({"name": "alice", "key": KEY_A})


async def test_http_credential_edge_cases(start_http: Starter, workspace: Path) -> None:
    http = await start_http(
        config=ServerConfig(workspaces=[workspace]), authenticator=WorkspaceCallers([workspace])
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    cases: list[tuple[list[tuple[str, str]], int]] = [
        ([("X-API-Key", KEY_A)], 200),
        ([("Authorization", f"Bearer {KEY_A}")], 200),
        ([("X-API-Key", KEY_A), ("Authorization", f"Bearer {KEY_A}")], 200),
        ([], 401),
        ([("X-API-Key", "")], 401),
        ([("X-API-Key", KEY_A), ("X-API-Key", KEY_A)], 401),
        ([("X-API-Key", KEY_A), ("Authorization", f"Bearer {KEY_B}")], 401),
        ([("Authorization", f"Basic {KEY_A}")], 401),
    ]
    for sent, status in cases:
        async with asyncio.timeout(TIMEOUT_S):
            for path in ("/a2a", "/a2a/v1/tasks"):
                method = "POST" if path == "/a2a" else "GET"
                response = await http.client.request(
                    method, path, json=body if method == "POST" else None, headers=sent
                )
                async with response:
                    text = await response.text()
                assert response.status == status, (sent, path, text)
                if status == 401:
                    assert response.headers["WWW-Authenticate"].startswith("Bearer")
                    assert KEY_A not in text and KEY_B not in text


async def test_http_undecodable_key_bytes_are_401_not_500(
    start_http: Starter, workspace: Path
) -> None:
    http = await start_http(authenticator=WorkspaceCallers([workspace]))
    url = http.client.make_url("/a2a/v1/tasks")
    request = (
        f"GET {url.path} HTTP/1.1\r\nHost: {url.host}\r\n".encode()
        + b"X-API-Key: \xff\xfe\x80key\r\nConnection: close\r\n\r\n"
    )
    async with asyncio.timeout(TIMEOUT_S):
        reader, writer = await asyncio.open_connection(url.host, url.port)
        try:
            writer.write(request)
            await writer.drain()
            status_line = await reader.readline()
        finally:
            writer.close()
            await writer.wait_closed()
    assert status_line.split()[1] == b"401"


@pytest.fixture
async def grpc_keyed(workspace: Path) -> AsyncIterator[tuple[EchoService, grpc.aio.Channel]]:
    service = EchoService(stateless=True)
    async with grpc_serving(service, WorkspaceCallers([workspace])) as served:
        yield service, served.channel


def _raw_get_task(channel: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    return channel.unary_unary("/lf.a2a.v1.A2AService/GetTask", lambda b: b, lambda b: b)


async def test_grpc_key_is_checked_before_the_message_is_decoded(
    grpc_keyed: tuple[EchoService, grpc.aio.Channel],
) -> None:
    service, channel = grpc_keyed
    call = _raw_get_task(channel)
    garbage = b"\xff\xff\xff\xff"
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(grpc.aio.AioRpcError) as unauthenticated:
            await call(garbage, metadata=(("a2a-version", "1.0"),))
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await call(garbage, metadata=(("a2a-version", "1.0"), ("x-api-key", KEY_A)))
    assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert service.contexts == []


@pytest.mark.parametrize(
    "metadata",
    [
        (("x-api-key", KEY_A), ("x-api-key", KEY_A)),
        (("x-api-key", KEY_A), ("authorization", f"Bearer {KEY_B}")),
        (("x-api-key", f" {KEY_A}"),),
        (("authorization", f"Token {KEY_A}"),),
    ],
)
async def test_grpc_credential_edge_cases(
    grpc_keyed: tuple[EchoService, grpc.aio.Channel], metadata: tuple[tuple[str, str], ...]
) -> None:
    _, channel = grpc_keyed
    request = pb.GetTaskRequest(id="task-1").SerializeToString()
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _raw_get_task(channel)(request, metadata=(("a2a-version", "1.0"), *metadata))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert KEY_A not in (caught.value.details() or "")


async def test_grpc_bearer_is_accepted(
    grpc_keyed: tuple[EchoService, grpc.aio.Channel],
) -> None:
    service, channel = grpc_keyed
    request = pb.GetTaskRequest(id="task-1").SerializeToString()
    async with asyncio.timeout(TIMEOUT_S):
        answer = await _raw_get_task(channel)(
            request, metadata=(("a2a-version", "1.0"), ("authorization", f"Bearer {KEY_A}"))
        )
    assert pb.Task.FromString(answer).id == "task-1"
    assert service.contexts[-1].caller.name == "alice"


def test_a_fifo_callers_file_is_refused_without_hanging(tmp_path: Path) -> None:
    # Every request reads callers.json on the event loop: a FIFO in its place must
    # not block the server (opening one for reading waits for a writer).
    path = tmp_path / CALLERS_FILE
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.append(read_callers(path, str(tmp_path))))
    reader.daemon = True
    reader.start()
    try:
        reader.join(TIMEOUT_S)
        if reader.is_alive():  # release the blocked reader before failing
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(TIMEOUT_S)
            pytest.fail("reading a FIFO callers file blocked")
    finally:
        path.unlink()  # the session's secret scan reads every file left behind
    entries, warnings = got[0]
    assert entries == []
    assert warnings == [f"callers file is not a regular file, no callers loaded: {path}"]
