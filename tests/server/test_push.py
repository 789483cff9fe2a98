"""Push delivery against a real webhook receiver on 127.0.0.1 (guard relaxed with
``allow_private_urls``): order, headers, retries, no retry on 4xx, bounds, secrets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from google.protobuf import json_format

from a2a_gateway.protocol.errors import InvalidParamsError
from a2a_gateway.server.outbound import OutboundClient
from a2a_gateway.server.push import (
    CONTENT_TYPE,
    TOKEN_HEADER,
    DeliveryResult,
    PushDispatcher,
    PushPolicy,
    notification_headers,
    validate_push_config,
)
from lf.a2a.v1 import a2a_pb2 as pb
from tests.support.ports import free_port
from tests.support.secrets import use_secret

TIMEOUT_S = 5.0
TOKEN = "notify-token-7c4e1a9f02b8"
CREDENTIALS = "webhook-secret-3d8b6f0e5a71"
QUERY_SECRET = "sig-5e0f8a2c7b1d93"
use_secret(TOKEN, CREDENTIALS, QUERY_SECRET)
FAST = PushPolicy(first_backoff_s=0.01, max_backoff_s=0.05, attempt_timeout_s=2.0)


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def state(self) -> str:
        return str(self.body["task"]["status"]["state"])


@dataclass
class Receiver:
    """A webhook receiver: records every request; answers each path with its scripted
    statuses in turn (then 200), optionally holding requests until released."""

    base: str = ""
    hits: list[Hit] = field(default_factory=list)
    statuses: dict[str, list[int]] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    hold: asyncio.Event | None = None
    in_flight: int = 0
    max_in_flight: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            body = orjson.loads(await request.read())
            self.hits.append(Hit(request.path, dict(request.headers), body))
            self.arrived.set()
            if self.hold is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TIMEOUT_S):
                        await self.hold.wait()
            else:
                await asyncio.sleep(0.01)  # let a concurrent delivery show, if any
            scripted = self.statuses.get(request.path) or []
            status = scripted.pop(0) if scripted else 200
            return web.Response(status=status, headers=self.headers.get(request.path))
        finally:
            self.in_flight -= 1

    async def first_hit(self) -> None:
        async with asyncio.timeout(TIMEOUT_S):
            await self.arrived.wait()

    def on(self, path: str) -> list[Hit]:
        return [hit for hit in self.hits if hit.path == path]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/{name}", found.handle)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(access_log=None)  # its access log would show the query
    found.base = f"http://127.0.0.1:{server.port}"
    yield found
    if found.hold is not None:
        found.hold.set()
    await server.close()


@dataclass
class Push:
    dispatcher: PushDispatcher
    results: list[DeliveryResult]

    async def settle(self) -> None:
        assert await self.dispatcher.wait_idle(TIMEOUT_S), "deliveries did not settle"


@pytest.fixture
async def push() -> AsyncIterator[Push]:
    results: list[DeliveryResult] = []
    client = OutboundClient(allow_private_urls=True)
    dispatcher = PushDispatcher(client, policy=FAST, on_result=results.append)
    yield Push(dispatcher, results)
    await dispatcher.aclose(grace_s=0.5)
    await client.aclose()


def task(state: int = pb.TASK_STATE_WORKING, task_id: str = "task-1") -> pb.Task:
    found = pb.Task(id=task_id, context_id="ctx-1")
    found.status.state = state  # type: ignore[assignment]
    found.status.timestamp.GetCurrentTime()
    return found


def config(
    url: str, config_id: str = "hook-1", *, secrets: bool = True
) -> pb.TaskPushNotificationConfig:
    made = pb.TaskPushNotificationConfig(id=config_id, task_id="task-1", url=url)
    if secrets:
        made.token = TOKEN
        made.authentication.scheme = "Bearer"
        made.authentication.credentials = CREDENTIALS
    return made


# --- delivery --------------------------------------------------------------------------


async def test_each_status_change_is_posted_in_order_with_its_headers(
    receiver: Receiver, push: Push
) -> None:
    hook = config(f"{receiver.base}/hook?sig={QUERY_SECRET}")
    live = task(pb.TASK_STATE_WORKING)
    states = [pb.TASK_STATE_WORKING, pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_WORKING]
    states.append(pb.TASK_STATE_COMPLETED)
    for state in states:
        live.status.state = state
        push.dispatcher.notify(live, [hook])
    live.artifacts.add(artifact_id="late")  # changed after the last notify: not sent
    await push.settle()

    hits = receiver.on("/hook")
    assert [hit.state for hit in hits] == [pb.TaskState.Name(s) for s in states]
    assert receiver.max_in_flight == 1  # one at a time per (task, config)
    for hit in hits:
        assert hit.headers["Content-Type"] == CONTENT_TYPE
        assert hit.headers[TOKEN_HEADER] == TOKEN
        assert hit.headers["Authorization"] == f"Bearer {CREDENTIALS}"
        event = json_format.ParseDict(hit.body, pb.StreamResponse())
        assert event.WhichOneof("payload") == "task"
        assert (event.task.id, event.task.context_id) == ("task-1", "ctx-1")
        assert not event.task.artifacts
    assert [r.outcome for r in push.results] == ["delivered"] * 4
    assert all(r.attempts == 1 and r.status == 200 for r in push.results)


async def test_no_token_or_authorization_header_when_not_configured(
    receiver: Receiver, push: Push
) -> None:
    push.dispatcher.notify(task(), [config(f"{receiver.base}/plain", secrets=False)])
    await push.settle()
    (hit,) = receiver.on("/plain")
    assert TOKEN_HEADER not in hit.headers
    assert "Authorization" not in hit.headers
    assert hit.headers["Content-Type"] == CONTENT_TYPE


async def test_every_config_of_the_task_gets_the_notification(
    receiver: Receiver, push: Push
) -> None:
    hooks = [config(f"{receiver.base}/a", "a"), config(f"{receiver.base}/b", "b")]
    push.dispatcher.notify(task(pb.TASK_STATE_COMPLETED), hooks)
    await push.settle()
    assert [h.state for h in receiver.on("/a")] == ["TASK_STATE_COMPLETED"]
    assert [h.state for h in receiver.on("/b")] == ["TASK_STATE_COMPLETED"]
    assert sorted(r.config_id for r in push.results) == ["a", "b"]


async def test_retries_on_500_then_succeeds_in_order(receiver: Receiver, push: Push) -> None:
    receiver.statuses["/flaky"] = [500, 503]
    hook = config(f"{receiver.base}/flaky")
    push.dispatcher.notify(task(pb.TASK_STATE_WORKING), [hook])
    push.dispatcher.notify(task(pb.TASK_STATE_COMPLETED), [hook])
    await push.settle()
    states = [hit.state for hit in receiver.on("/flaky")]
    # The first notification is retried until it lands; only then the second goes.
    assert states == ["TASK_STATE_WORKING"] * 3 + ["TASK_STATE_COMPLETED"]
    assert [(r.outcome, r.attempts) for r in push.results] == [("delivered", 3), ("delivered", 1)]


async def test_retries_on_429_honouring_retry_after(receiver: Receiver, push: Push) -> None:
    receiver.statuses["/busy"] = [429]
    receiver.headers["/busy"] = {"Retry-After": "0"}
    push.dispatcher.notify(task(), [config(f"{receiver.base}/busy")])
    await push.settle()
    assert len(receiver.on("/busy")) == 2
    assert push.results[0].outcome == "delivered"


async def test_no_retry_on_404_or_other_4xx(receiver: Receiver, push: Push) -> None:
    receiver.statuses["/gone"] = [404]
    receiver.statuses["/denied"] = [401]
    push.dispatcher.notify(task(), [config(f"{receiver.base}/gone", "gone")])
    push.dispatcher.notify(task(), [config(f"{receiver.base}/denied", "denied")])
    await push.settle()
    assert len(receiver.on("/gone")) == 1
    assert len(receiver.on("/denied")) == 1
    outcomes = {r.config_id: (r.outcome, r.attempts, r.status) for r in push.results}
    assert outcomes == {"gone": ("failed", 1, 404), "denied": ("failed", 1, 401)}


async def test_retries_are_bounded(receiver: Receiver, push: Push) -> None:
    receiver.statuses["/down"] = [502] * 10
    push.dispatcher.notify(task(), [config(f"{receiver.base}/down")])
    await push.settle()
    assert len(receiver.on("/down")) == FAST.max_attempts
    (result,) = push.results
    assert (result.outcome, result.attempts, result.status) == ("failed", 3, 502)


async def test_connection_errors_are_retried_then_given_up(push: Push) -> None:
    port = free_port()  # nothing listens there
    push.dispatcher.notify(task(), [config(f"http://127.0.0.1:{port}/hook")])
    await push.settle()
    (result,) = push.results
    assert (result.outcome, result.attempts, result.status) == ("failed", 3, None)
    assert "could not connect" in result.detail


async def test_a_slow_receiver_is_bounded_per_attempt(receiver: Receiver) -> None:
    receiver.hold = asyncio.Event()
    results: list[DeliveryResult] = []
    policy = PushPolicy(max_attempts=2, first_backoff_s=0.01, attempt_timeout_s=0.2)
    async with OutboundClient(allow_private_urls=True) as client:
        dispatcher = PushDispatcher(client, policy=policy, on_result=results.append)
        dispatcher.notify(task(), [config(f"{receiver.base}/slow")])
        assert await dispatcher.wait_idle(TIMEOUT_S)
        await dispatcher.aclose()
    (result,) = results
    assert (result.outcome, result.attempts) == ("failed", 2)
    assert "did not answer" in result.detail


async def test_a_redirect_is_not_followed_nor_retried(receiver: Receiver, push: Push) -> None:
    receiver.statuses["/moved"] = [302]
    receiver.headers["/moved"] = {"Location": f"{receiver.base}/elsewhere"}
    push.dispatcher.notify(task(), [config(f"{receiver.base}/moved")])
    await push.settle()
    assert [hit.path for hit in receiver.hits] == ["/moved"]
    assert push.results[0].outcome == "failed"
    assert "redirect" in push.results[0].detail


async def test_the_guard_applies_to_webhooks(receiver: Receiver) -> None:
    results: list[DeliveryResult] = []
    async with OutboundClient() as client:  # guard on: http and loopback refused
        dispatcher = PushDispatcher(client, policy=FAST, on_result=results.append)
        dispatcher.notify(task(), [config(f"{receiver.base}/hook")])
        dispatcher.notify(
            task(), [config(f"https://127.0.0.1:{receiver.base.rsplit(':', 1)[1]}/hook")]
        )
        assert await dispatcher.wait_idle(TIMEOUT_S)
        await dispatcher.aclose()
    assert receiver.hits == []
    assert [r.outcome for r in results] == ["failed", "failed"]
    assert "only https" in results[0].detail
    assert "loopback" in results[1].detail


async def test_secrets_and_url_paths_never_reach_the_logs(
    receiver: Receiver, push: Push, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.statuses["/logged"] = [500, 404]
    with caplog.at_level(logging.DEBUG):
        push.dispatcher.notify(task(), [config(f"{receiver.base}/logged?sig={QUERY_SECRET}")])
        await push.settle()
        bad = config(f"{receiver.base}/logged")
        bad.token = TOKEN + "\r\nX-Injected: 1"
        push.dispatcher.notify(task(), [bad])
    assert "given up" in caplog.text and "skipped" in caplog.text
    for secret in (TOKEN, CREDENTIALS, QUERY_SECRET, "/logged"):
        assert secret not in caplog.text
    for result in push.results:
        assert TOKEN not in result.detail and QUERY_SECRET not in result.detail


# --- queues and shutdown ----------------------------------------------------------------


async def test_aclose_cancels_what_is_left(receiver: Receiver) -> None:
    receiver.hold = asyncio.Event()
    results: list[DeliveryResult] = []
    async with OutboundClient(allow_private_urls=True) as client:
        dispatcher = PushDispatcher(client, policy=FAST, on_result=results.append)
        hook = config(f"{receiver.base}/held")
        for state in (pb.TASK_STATE_WORKING, pb.TASK_STATE_COMPLETED):
            dispatcher.notify(task(state), [hook])
        await receiver.first_hit()
        await dispatcher.aclose(grace_s=0.05)
        assert dispatcher.pending == 0
        dispatcher.notify(task(), [hook])  # after close: ignored
        assert dispatcher.pending == 0
    assert [r.outcome for r in results] == ["dropped"]  # the queued COMPLETED one
    assert len(receiver.hits) == 1


async def test_forget_drops_waiting_notifications(receiver: Receiver, push: Push) -> None:
    receiver.hold = asyncio.Event()
    hook = config(f"{receiver.base}/deleted")
    for state in (pb.TASK_STATE_WORKING, pb.TASK_STATE_INPUT_REQUIRED):
        push.dispatcher.notify(task(state), [hook])
    await receiver.first_hit()
    push.dispatcher.forget("task-1", "hook-1")
    receiver.hold.set()
    await push.settle()
    assert [hit.state for hit in receiver.hits] == ["TASK_STATE_WORKING"]


async def test_a_full_queue_drops_its_oldest_waiting_notification(receiver: Receiver) -> None:
    receiver.hold = asyncio.Event()
    results: list[DeliveryResult] = []
    policy = PushPolicy(first_backoff_s=0.01, max_pending=2)
    async with OutboundClient(allow_private_urls=True) as client:
        dispatcher = PushDispatcher(client, policy=policy, on_result=results.append)
        hook = config(f"{receiver.base}/full")
        states = [pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING]
        states += [pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_COMPLETED]
        dispatcher.notify(task(states[0]), [hook])
        await receiver.first_hit()
        for state in states[1:]:
            dispatcher.notify(task(state), [hook])
        receiver.hold.set()
        assert await dispatcher.wait_idle(TIMEOUT_S)
        await dispatcher.aclose()
    sent = [hit.state for hit in receiver.hits]
    assert sent == ["TASK_STATE_SUBMITTED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED"]
    assert [r.outcome for r in results].count("dropped") == 1


# --- config validation ------------------------------------------------------------------


def test_validate_push_config_names_the_field_and_hides_secrets() -> None:
    good = config("https://hooks.example.com/a2a")
    validate_push_config(good, allow_private_urls=False)
    cases = [
        (config("http://hooks.example.com/a2a"), "url", "only https"),
        (config("https://10.0.0.7/a2a"), "url", "private"),
        (pb.TaskPushNotificationConfig(id="x"), "url", "is required"),
    ]
    bad_token = config("https://hooks.example.com/a2a")
    bad_token.token = TOKEN + "\n"
    cases.append((bad_token, "token", "printable"))
    bad_scheme = config("https://hooks.example.com/a2a")
    bad_scheme.authentication.scheme = "Bearer x"
    cases.append((bad_scheme, "authentication.scheme", "auth scheme"))
    bad_credentials = config("https://hooks.example.com/a2a")
    bad_credentials.authentication.credentials = CREDENTIALS + "\x00"
    cases.append((bad_credentials, "authentication.credentials", "printable"))
    for bad, field_name, words in cases:
        with pytest.raises(InvalidParamsError) as invalid:
            validate_push_config(bad, allow_private_urls=False, prefix="configuration.x")
        assert invalid.value.message.startswith(f"configuration.x.{field_name}: ")
        assert words in invalid.value.message
        assert TOKEN not in invalid.value.message and CREDENTIALS not in invalid.value.message
    validate_push_config(config("http://127.0.0.1:9/a2a"), allow_private_urls=True)


def test_notification_headers() -> None:
    assert notification_headers(config("https://x.example/", secrets=False)) == {
        "Content-Type": CONTENT_TYPE
    }
    basic = config("https://x.example/")
    basic.authentication.scheme = "Basic"
    headers = notification_headers(basic)
    assert headers["Authorization"] == f"Basic {CREDENTIALS}"
    assert headers[TOKEN_HEADER] == TOKEN
