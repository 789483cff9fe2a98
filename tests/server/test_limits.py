"""Rate limits (token buckets per caller and per address) and per-caller task caps:
the arithmetic with a fake clock, then the 429 / RESOURCE_EXHAUSTED path on real servers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from a2a_gateway.protocol.context import ANONYMOUS, Caller
from a2a_gateway.protocol.errors import RateLimitedError
from a2a_gateway.server.auth import AllowAnonymous, WorkspaceCallers
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.grpc_binding import peer_address
from a2a_gateway.server.grpc_server import build_grpc_server
from a2a_gateway.server.limits import (
    CallerLimits,
    RateLimits,
    RequestLimiter,
    TaskCaps,
    TaskLimiter,
    TokenBuckets,
    address_key,
)
from a2a_gateway.settings import SettingsError, resolve
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.echo import EchoService
from tests.support.grpc_serving import grpc_serving

from .conftest import TIMEOUT_S, Starter

KEY_FAST = "limits-key-fast-7a1b2c3d"
KEY_SLOW = "limits-key-slow-4e5f6a7b"
ALICE = Caller("alice", "/ws")
BOB = Caller("bob", "/ws")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rate_limited(call: object) -> RateLimitedError:
    assert callable(call)
    with pytest.raises(RateLimitedError) as caught:
        call()
    return caught.value


# --- token buckets ----------------------------------------------------------------------


def test_bucket_bursts_a_minute_then_refills_steadily() -> None:
    clock = Clock()
    buckets = TokenBuckets(clock=clock)
    assert all(buckets.take("k", 6) == 0.0 for _ in range(6))
    assert buckets.take("k", 6) == pytest.approx(10.0)  # 6/min: one token per 10 s
    clock.now += 5
    assert buckets.take("k", 6) == pytest.approx(5.0)
    clock.now += 5
    assert buckets.take("k", 6) == 0.0
    assert buckets.take("other", 6) == 0.0  # keys are independent
    assert buckets.take("k", 0) == 0.0  # zero: unlimited


def test_bucket_follows_a_changed_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(clock=clock)
    for _ in range(3):
        buckets.take("k", 60)
    # 57 left, but the new rate caps the bucket at 2.
    assert [buckets.take("k", 2) for _ in range(3)] == [0.0, 0.0, pytest.approx(30.0)]
    clock.now += 60
    assert buckets.take("k", 120) == 0.0


def test_buckets_stay_bounded() -> None:
    clock = Clock()
    buckets = TokenBuckets(clock=clock, max_keys=100)
    for index in range(1000):
        buckets.take(f"ip-{index}", 10)
        clock.now += 0.001
    assert len(buckets) <= 100
    clock.now += 120  # everything refilled: all of them are forgettable
    buckets.take("late", 10)
    assert len(buckets) <= 100


def test_the_request_that_fills_the_table_is_counted() -> None:
    # Pruning drops full buckets first; the bucket just created for the request that
    # triggered it must not be among them, or that request would not be counted.
    buckets = TokenBuckets(clock=Clock(), max_keys=2)
    assert buckets.take("a", 1) == 0.0 and buckets.take("b", 1) == 0.0
    assert buckets.take("c", 1) == 0.0
    assert buckets.take("c", 1) == pytest.approx(60.0)


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("not-an-ip", "not-an-ip"),
    ],
)
def test_address_keys(address: str, key: str) -> None:
    assert address_key(address) == key


def test_request_limiter_per_address_and_per_caller() -> None:
    clock = Clock()
    limiter = RequestLimiter(RateLimits(per_caller_per_minute=2, per_ip_per_minute=3), clock=clock)
    for _ in range(3):
        limiter.check_address("2001:db8::1")
    error = rate_limited(lambda: limiter.check_address("2001:db8::2"))  # same /64
    assert error.retry_after_s == 20 and error.metadata["limit"] == "address"
    limiter.check_address("198.51.100.1")
    limiter.check_address(None)  # not an IP connection: not limited

    limiter.check_caller(ALICE)
    limiter.check_caller(ALICE)
    error = rate_limited(lambda: limiter.check_caller(ALICE))
    assert error.retry_after_s == 30 and "alice" in error.message
    limiter.check_caller(BOB)
    for _ in range(10):  # bob's own override: unlimited
        limiter.check_caller(BOB, CallerLimits(rate_limit_per_minute=0))
    clock.now += 30
    limiter.check_caller(ALICE)


def test_the_anonymous_caller_is_limited_per_address_only() -> None:
    limiter = RequestLimiter(RateLimits(per_caller_per_minute=1))
    tasks = TaskLimiter(TaskCaps(max_running_tasks=1, max_open_contexts=1))
    for index in range(5):
        limiter.check_caller(ANONYMOUS)
        tasks.start(ANONYMOUS, f"c{index}").finish(keep_context_open=True)
    assert tasks.running(ANONYMOUS) == 0 and tasks.open_contexts(ANONYMOUS) == 0


def test_limits_reject_negative_values() -> None:
    with pytest.raises(ValueError):
        RateLimits(per_ip_per_minute=-1)
    with pytest.raises(ValueError):
        TaskCaps(max_open_contexts=-1)


# --- task caps ---------------------------------------------------------------------------


def test_running_task_cap() -> None:
    limiter = TaskLimiter(TaskCaps(max_running_tasks=2, max_open_contexts=0))
    first = limiter.start(ALICE, "c1")
    limiter.start(ALICE, "c2")
    error = rate_limited(lambda: limiter.start(ALICE, "c3"))
    assert error.metadata["limit"] == "runningTasks" and error.retry_after_s > 0
    limiter.start(BOB, "c1")  # per caller
    first.finish(keep_context_open=False)
    first.finish(keep_context_open=False)  # idempotent: frees one slot, not two
    limiter.start(ALICE, "c3")
    rate_limited(lambda: limiter.start(ALICE, "c4"))
    assert limiter.running(ALICE) == 2


def test_open_context_cap_counts_waiting_contexts_until_they_end_or_expire() -> None:
    clock = Clock()
    limiter = TaskLimiter(
        TaskCaps(max_running_tasks=0, max_open_contexts=2, context_idle_s=600), clock=clock
    )
    limiter.start(ALICE, "done").finish(keep_context_open=False)  # terminal: closed
    limiter.start(ALICE, "waiting").finish(keep_context_open=True)  # input-required
    running = limiter.start(ALICE, "running")
    assert limiter.open_contexts(ALICE) == 2
    error = rate_limited(lambda: limiter.start(ALICE, "new"))
    assert error.metadata["limit"] == "openContexts"
    assert error.retry_after_s == 600  # when "waiting" expires
    # Continuing an open context is always allowed.
    limiter.start(ALICE, "waiting").finish(keep_context_open=True)
    running.finish(keep_context_open=False)
    limiter.start(ALICE, "new").finish(keep_context_open=True)
    rate_limited(lambda: limiter.start(ALICE, "third"))
    limiter.close_context(ALICE, "new")  # its waiting task was canceled
    limiter.start(ALICE, "third").finish(keep_context_open=False)
    clock.now += 601
    assert limiter.open_contexts(ALICE) == 0  # "waiting" expired


def test_caller_overrides_come_from_the_policy() -> None:
    overrides = {ALICE: CallerLimits(max_running_tasks=1), BOB: CallerLimits(max_running_tasks=0)}
    limiter = TaskLimiter(
        TaskCaps(max_running_tasks=3),
        limits_for=lambda caller: overrides.get(caller, CallerLimits()),
    )
    limiter.start(ALICE, "a")
    rate_limited(lambda: limiter.start(ALICE, "b"))
    for index in range(10):
        limiter.start(BOB, f"b{index}")
    carol = Caller("carol", "/ws")
    for index in range(3):
        limiter.start(carol, f"c{index}")
    rate_limited(lambda: limiter.start(carol, "c3"))


# --- settings -----------------------------------------------------------------------------


def test_settings_for_limits() -> None:
    settings = resolve({}, environ={})
    assert settings.rate_limit_per_minute == 0 and settings.ip_rate_limit_per_minute == 0
    assert settings.max_running_tasks == TaskCaps().max_running_tasks
    env = {"A2A_GATEWAY_IP_RATE_LIMIT_PER_MINUTE": "120"}
    assert resolve({}, environ=env).ip_rate_limit_per_minute == 120
    with pytest.raises(SettingsError, match="max_open_contexts must be at least 0"):
        resolve({}, environ={"A2A_GATEWAY_MAX_OPEN_CONTEXTS": "-5"})
    with pytest.raises(SettingsError, match="--rate-limit-per-minute"):
        resolve({"rate_limit_per_minute": -1}, environ={})
    assert ServerConfig().rate_limits == RateLimits()


# --- the 429 path on real servers -------------------------------------------------------------


#: The ``workspace`` of this module's tests: one caller without a rate limit, one with.
pytestmark = pytest.mark.callers(
    {"name": "fast", "key": KEY_FAST, "rate_limit_per_minute": 0},
    {"name": "slow", "key": KEY_SLOW},
)


async def test_http_429_with_retry_after_per_caller(start_http: Starter, workspace: Path) -> None:
    callers = WorkspaceCallers([workspace], limits=RateLimits(per_caller_per_minute=2))
    http = await start_http(authenticator=callers)
    body = {"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {}}
    async with asyncio.timeout(TIMEOUT_S):
        statuses = []
        for _ in range(2):
            async with await http.client.post(
                "/a2a", json=body, headers={"X-API-Key": KEY_SLOW}
            ) as r:
                statuses.append(r.status)
        assert statuses == [200, 200]
        # The budget is the caller's, whatever the binding.
        async with await http.client.get("/a2a/v1/tasks", headers={"X-API-Key": KEY_SLOW}) as r:
            rest = await r.json(content_type=None)
            assert r.status == 429
            assert 1 <= int(r.headers["Retry-After"]) <= 30  # a token every 30 s
        assert rest["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert rest["error"]["details"][0]["reason"] == "RATE_LIMITED"
        async with await http.client.post("/a2a", json=body, headers={"X-API-Key": KEY_SLOW}) as r:
            rpc = await r.json(content_type=None)
            assert r.status == 429 and 1 <= int(r.headers["Retry-After"]) <= 30
        assert rpc["error"]["code"] == RateLimitedError.spec.jsonrpc_code
        for _ in range(5):  # "fast" has its own override: unlimited
            async with await http.client.post(
                "/a2a", json=body, headers={"Authorization": f"Bearer {KEY_FAST}"}
            ) as r:
                assert r.status == 200
    assert [name for name, *_ in http.service.calls].count("list_tasks") == 7


async def test_http_429_per_address_comes_before_authentication(start_http: Starter) -> None:
    http = await start_http(authenticator=AllowAnonymous(limits=RateLimits(per_ip_per_minute=3)))
    async with asyncio.timeout(TIMEOUT_S):
        for _ in range(3):
            async with await http.client.get("/a2a/v1/tasks") as r:
                assert r.status == 200
        async with await http.client.get("/a2a/v1/tasks") as r:
            assert r.status == 429 and 1 <= int(r.headers["Retry-After"]) <= 20
        # The public card is not metered (cacheable, no work behind it).
        async with await http.client.get("/.well-known/agent-card.json") as r:
            assert r.status == 200


async def test_http_guessing_keys_is_throttled_per_address(
    start_http: Starter, workspace: Path
) -> None:
    callers = WorkspaceCallers([workspace], limits=RateLimits(per_ip_per_minute=4))
    http = await start_http(authenticator=callers)
    statuses = []
    async with asyncio.timeout(TIMEOUT_S):
        for index in range(6):
            headers = {"X-API-Key": f"guess-{index:08d}"}
            async with await http.client.get("/a2a/v1/tasks", headers=headers) as r:
                statuses.append(r.status)
    assert statuses == [401, 401, 401, 401, 429, 429]


@pytest.fixture
async def grpc_limited(workspace: Path) -> AsyncIterator[grpc.aio.Channel]:
    callers = WorkspaceCallers([workspace], limits=RateLimits(per_caller_per_minute=1))
    async with grpc_serving(EchoService(stateless=True), callers) as served:
        yield served.channel


async def test_grpc_resource_exhausted_with_retry_after(grpc_limited: grpc.aio.Channel) -> None:
    call = grpc_limited.unary_unary(
        "/lf.a2a.v1.A2AService/GetTask",
        pb.GetTaskRequest.SerializeToString,
        pb.Task.FromString,
    )
    metadata = (("a2a-version", "1.0"), ("x-api-key", KEY_SLOW))
    async with asyncio.timeout(TIMEOUT_S):
        await call(pb.GetTaskRequest(id="t-1"), metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(pb.GetTaskRequest(id="t-1"), metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailer = dict(caught.value.trailing_metadata() or ())["grpc-status-details-bin"]
    assert isinstance(trailer, bytes)
    info = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(trailer).details[0].Unpack(info)
    assert info.reason == "RATE_LIMITED"
    assert 1 <= int(info.metadata["retryAfterSeconds"]) <= 60


@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:127.0.0.1:54321", "127.0.0.1"),
        ("ipv6:[::1]:54321", "::1"),
        ("ipv6:%5B2001:db8::7%5D:443", "2001:db8::7"),
        ("unix:/tmp/socket", None),
        ("", None),
        (None, None),
    ],
)
def test_grpc_peer_addresses(peer: str | None, address: str | None) -> None:
    assert peer_address(peer) == address


async def test_grpc_per_address_limit() -> None:
    authenticator = AllowAnonymous(limits=RateLimits(per_ip_per_minute=2))
    config = ServerConfig(host="127.0.0.1", grpc_port=0)
    server, port = await build_grpc_server(EchoService(stateless=True), config, authenticator)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(
                "/lf.a2a.v1.A2AService/GetTask",
                pb.GetTaskRequest.SerializeToString,
                pb.Task.FromString,
            )
            codes = []
            async with asyncio.timeout(TIMEOUT_S):
                for _ in range(3):
                    try:
                        await call(pb.GetTaskRequest(id="t"), metadata=(("a2a-version", "1.0"),))
                        codes.append(grpc.StatusCode.OK)
                    except grpc.aio.AioRpcError as exc:
                        codes.append(exc.code())
    finally:
        await server.stop(None)
    assert codes == [grpc.StatusCode.OK, grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED]
