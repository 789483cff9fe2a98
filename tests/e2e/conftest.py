"""A whole gateway in-process on real ports, and one wire driver per binding.

The drivers speak raw JSON-RPC, HTTP+JSON and gRPC (no client library of ours), so the
scenario table checks what each binding puts on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf import json_format, message_factory
from google.rpc import error_details_pb2, status_pb2

from a2a_gateway.local.layout import WorkspaceLayout
from a2a_gateway.protocol import codec, routes, sse
from a2a_gateway.protocol.service import SERVICE_DESCRIPTOR
from a2a_gateway.serve import Gateway
from a2a_gateway.settings import resolve
from tests.support.ports import HOST, free_ports
from tests.support.processes import CARD_PATH, ServerProcess, require_peer_venv, sdk_server_command
from tests.support.workspace import write_callers

from ..agent.llm_support import llm  # noqa: F401 (the scripted model, a fixture)
from ..telegram.conftest import bot_api  # noqa: F401 (the fake Bot API, a fixture)

KEY_ALICE = "alice-key-0f3e9a7c51d2"
KEY_BOB = "bob-key-7d1c0b9e44aa"
BINDINGS = ("jsonrpc", "rest", "grpc")
#: The key the 0.3-only SDK agent (:func:`legacy_sdk_url`) requires.
LEGACY_PEER_KEY = "legacy-peer-key-2b7e41c9d0"


@pytest.fixture(scope="session")
def legacy_sdk_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The official SDK echo agent offering only A2A 0.3 JSON-RPC and REST (started with
    ``--only-0.3``: it refuses any call announcing 1.x), :data:`LEGACY_PEER_KEY` required."""
    require_peer_venv()
    (port,) = free_ports(1)
    base = f"http://{HOST}:{port}"
    command = sdk_server_command(port, 0, transports=("jsonrpc", "rest"), api_key=LEGACY_PEER_KEY)
    server = ServerProcess(
        "sdk-peer-0.3",
        [*command, "--only-0.3"],
        tmp_path_factory.mktemp("sdk-peer-03"),
        base + CARD_PATH,
        grpc_port=None,
        strict_shutdown=False,
    )
    with server.running():
        yield base


class WireError(Exception):
    """An error answer: the ErrorInfo reason plus the binding's own code."""

    def __init__(self, reason: str, code: Any, message: str) -> None:
        super().__init__(f"{reason} ({code}): {message}")
        self.reason = reason
        self.code = code
        self.message = message


@dataclass
class Driver:
    binding: str
    http: aiohttp.ClientSession
    base: str
    channel: grpc.aio.Channel
    key: str = KEY_ALICE
    version: str | None = "1.0"
    #: Sent as ``A2A-Extensions`` (gRPC metadata ``a2a-extensions``) when not empty.
    extensions: str = ""
    #: The ``A2A-Extensions`` the last answer carried (header or initial metadata).
    echoed: str | None = None
    #: Headers (gRPC metadata) added to every call.
    extra: dict[str, str] = field(default_factory=dict)
    #: The id of each stream event received (SSE ``id:``), in order.
    event_ids: list[str | None] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        headers = {"X-API-Key": self.key} if self.key else {}
        if self.version is not None:
            headers["A2A-Version"] = self.version
        if self.extensions:
            headers["A2A-Extensions"] = self.extensions
        return {**headers, **self.extra}

    async def call(self, rpc: str, request: dict[str, Any]) -> dict[str, Any]:
        events = [e async for e in self._run(rpc, request, stream=False)]
        return events[0]

    async def stream(self, rpc: str, request: dict[str, Any]) -> list[dict[str, Any]]:
        return [e async for e in self._run(rpc, request, stream=True)]

    def open_stream(self, rpc: str, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        return self._run(rpc, request, stream=True)

    def _run(
        self, rpc: str, request: dict[str, Any], *, stream: bool
    ) -> AsyncIterator[dict[str, Any]]:
        if self.binding == "jsonrpc":
            return self._jsonrpc(rpc, request, stream)
        if self.binding == "rest":
            return self._rest(rpc, request, stream)
        return self._grpc(rpc, request, stream)

    _ids = itertools.count(1)

    async def _jsonrpc(
        self, rpc: str, request: dict[str, Any], stream: bool
    ) -> AsyncIterator[dict[str, Any]]:
        request_id = next(self._ids)
        body = {"jsonrpc": "2.0", "id": request_id, "method": rpc, "params": request}
        async with self.http.post(
            f"{self.base}/a2a", json=body, headers=self.headers()
        ) as response:
            self.echoed = response.headers.get("A2A-Extensions")
            if response.content_type == sse.CONTENT_TYPE:
                assert stream, "SSE for a unary call"
                async for data in _sse_events(response, self.event_ids):
                    envelope = json.loads(data)
                    assert envelope["id"] == request_id
                    if "error" in envelope:
                        raise _jsonrpc_error(envelope["error"])
                    yield envelope["result"]
                return
            envelope = await response.json(content_type=None)
            if "error" in envelope:
                raise _jsonrpc_error(envelope["error"], response.status)
            assert response.status == 200
            assert envelope["id"] == request_id
            yield envelope["result"]

    async def _rest(
        self, rpc: str, request: dict[str, Any], stream: bool
    ) -> AsyncIterator[dict[str, Any]]:
        tenant = request.get("tenant")
        route = (routes.TENANT if tenant else routes.PRIMARY)[rpc]
        path, query, body = route.build(
            request if tenant else {k: v for k, v in request.items() if k != "tenant"}
        )
        url = f"{self.base}/a2a/v1{path}"
        async with self.http.request(
            route.http_method, url, params=query, json=body, headers=self.headers()
        ) as response:
            self.echoed = response.headers.get("A2A-Extensions")
            if response.content_type == sse.CONTENT_TYPE:
                assert stream, "SSE for a unary call"
                async for data in _sse_events(response, self.event_ids):
                    payload = json.loads(data)
                    if "error" in payload:
                        raise _status_error(payload["error"])
                    yield payload
                return
            payload = await response.json(content_type=None)
            if response.status != 200:
                raise _status_error(payload["error"], response.status)
            yield payload

    async def _grpc(
        self, rpc: str, request: dict[str, Any], stream: bool
    ) -> AsyncIterator[dict[str, Any]]:
        method = SERVICE_DESCRIPTOR.methods_by_name[rpc]
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        message = json_format.ParseDict(request, request_cls())
        path = f"/{SERVICE_DESCRIPTOR.full_name}/{rpc}"
        metadata = tuple((k.lower(), v) for k, v in self.headers().items())
        try:
            if method.server_streaming:
                call = self.channel.unary_stream(
                    path,
                    request_serializer=request_cls.SerializeToString,
                    response_deserializer=response_cls.FromString,
                )(message, metadata=metadata, timeout=30)
                self.echoed = _echoed(await call.initial_metadata())
                async for item in call:
                    yield codec.to_dict(item)
            else:
                unary = self.channel.unary_unary(
                    path,
                    request_serializer=request_cls.SerializeToString,
                    response_deserializer=response_cls.FromString,
                )(message, metadata=metadata, timeout=30)
                answer = await unary
                self.echoed = _echoed(await unary.initial_metadata())
                yield codec.to_dict(answer)
        except grpc.aio.AioRpcError as exc:
            raise _grpc_error(exc) from None


def _echoed(metadata: Any) -> str | None:
    values = [v for k, v in metadata or () if k == "a2a-extensions" and isinstance(v, str)]
    return values[0] if values else None


def pending_records(workspace: Path) -> list[dict[str, Any]]:
    """The records of ``<workspace>/.a2a/pending.json`` (none without the file). No
    exists() first: the file is removed once its last record goes, which can fall between
    a check and the read (a test failed once that way)."""
    try:
        records: list[dict[str, Any]] = json.loads(WorkspaceLayout(workspace).pending.read_text())
    except FileNotFoundError:
        return []
    return records


def files_holding(root: Path, value: str) -> list[Path]:
    """Every file under ``root`` whose bytes hold ``value`` (task files, their
    history, transcripts, logs, the owner's inbox): the secret scans."""
    needle = value.encode()
    return [path for path in root.rglob("*") if path.is_file() and needle in path.read_bytes()]


@dataclass
class BearerDriver(Driver):
    """Presents the key as ``Authorization: Bearer``, or sends custom headers."""

    raw_headers: dict[str, str] | None = None

    def headers(self) -> dict[str, str]:
        if self.raw_headers is not None:
            return {**self.raw_headers, "A2A-Version": "1.0"}
        return {"Authorization": f"Bearer {self.key}", "A2A-Version": "1.0"}


def as_bearer(driver: Driver, raw: dict[str, str] | None = None) -> BearerDriver:
    """The same driver presenting ``Authorization: Bearer <its key>``, or ``raw``."""
    return BearerDriver(
        driver.binding, driver.http, driver.base, driver.channel, driver.key, "1.0", raw_headers=raw
    )


async def _sse_events(
    response: aiohttp.ClientResponse, ids: list[str | None] | None = None
) -> AsyncIterator[str]:
    decoder = sse.Decoder()
    async for chunk in response.content.iter_any():
        for event in decoder.feed(chunk):
            if ids is not None:
                ids.append(event.id)
            yield event.data


def _jsonrpc_error(error: dict[str, Any], status: int = 200) -> WireError:
    data = error.get("data") or []
    reason = next((d["reason"] for d in data if d.get("@type", "").endswith("ErrorInfo")), "")
    return WireError(reason, error["code"], error["message"])


def _status_error(error: dict[str, Any], status: int = 0) -> WireError:
    details = error.get("details") or []
    reason = next((d["reason"] for d in details if d.get("@type", "").endswith("ErrorInfo")), "")
    return WireError(reason, status or error.get("code"), error.get("message", ""))


def _grpc_error(exc: grpc.aio.AioRpcError) -> WireError:
    reason = ""
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    reason = info.reason
    return WireError(reason, exc.code(), exc.details() or "")


@contextlib.asynccontextmanager
async def running_gateway(tmp_path: Path, **settings: Any) -> AsyncIterator[Gateway]:
    """A faux gateway on free ports whose workspace has the callers alice and bob;
    ``settings`` add to or override the defaults."""
    workspace = tmp_path / "ws"
    write_callers(workspace, [{"name": "alice", "key": KEY_ALICE}, {"name": "bob", "key": KEY_BOB}])
    defaults = {"workspace": [str(workspace)], "port": 0, "grpc_port": 0, "faux": True}
    server = Gateway(resolve({**defaults, "keepalive": 0.2, **settings}, environ={}))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running_gateway(tmp_path) as server:
        yield server


@pytest.fixture(params=BINDINGS)
async def driver(request: pytest.FixtureRequest, gateway: Gateway) -> AsyncIterator[Driver]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel,
    ):
        yield Driver(request.param, http, f"http://127.0.0.1:{gateway.http_port}", channel)


async def run_bash(
    script: str, cwd: Path, env: dict[str, str], timeout_s: float = 120
) -> tuple[int | None, str]:
    """``bash -c script`` in ``cwd`` (a walk-through of the docs): its exit status and
    its output, stdout and stderr together."""
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        script,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    return process.returncode, out.decode()
