"""Push notification delivery: POST the whole task to every webhook of the task.

The engine calls :meth:`PushDispatcher.notify` on every status change of a task (not
per text chunk) with the task and its push configs (secrets opened). Each call
snapshots the task as ``{"task": <ProtoJSON>}`` at once, so later changes to the live
task do not leak into an earlier notification. A config registered over A2A 0.3 gets
what 0.3 receivers expect instead: the bare 0.3 Task JSON (``kind: "task"``, lower-case
states), ``Content-Type: application/json``, as 0.3 agents sent it.

Delivery (digest §11, seed "Push"):

- ``POST <url>`` through the guarded :class:`~.outbound.OutboundClient`, with
  ``Content-Type: application/a2a+json``, ``X-A2A-Notification-Token: <token>`` when
  the config has a token, and ``Authorization: <scheme> <credentials>`` when it has
  ``authentication``.
- One ordered queue per (task, config): a notification is sent only after the previous
  one for the same webhook is delivered or given up, so a receiver sees the states of
  a task in order. Different configs and tasks are independent. A queue holds at most
  ``max_pending`` notifications; beyond that the oldest waiting one is dropped (each
  notification carries the whole task, so the newer one supersedes it).
- Retries with exponential backoff (``first_backoff_s``, doubling, at most
  ``max_backoff_s``; a ``Retry-After`` in seconds is honoured within that cap) on
  connection errors, timeouts, 5xx and 429, for at most ``max_attempts`` attempts and
  ``max_delivery_s`` in all. No retry on any other status, on a redirect, or when the
  guard refuses the URL. Each attempt is bounded by ``attempt_timeout_s`` (10 s).
- Logs name the task, the config id and the webhook's ``scheme://host:port``; never
  the path, the query, the token or the credentials.

Every worker task is owned: :meth:`PushDispatcher.aclose` lets pending deliveries finish
for a short grace, then cancels what is left and waits for it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import orjson

from a2a_gateway.protocol import compat03, proto_dict, tracing
from a2a_gateway.protocol.closing import AsyncCloseable
from a2a_gateway.protocol.context import PROTOCOL_VERSION
from a2a_gateway.protocol.errors import FieldViolation, InvalidParamsError
from lf.a2a.v1 import a2a_pb2 as pb

from .outbound import (
    OutboundClient,
    OutboundConnectionError,
    OutboundError,
    check_url,
    url_label,
)

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/a2a+json"
#: What a webhook registered over A2A 0.3 is sent (0.3 agents posted plain JSON).
LEGACY_CONTENT_TYPE = "application/json"
TOKEN_HEADER = "X-A2A-Notification-Token"
MAX_SECRET_CHARS = 4096
_RESPONSE_BYTES = 4096  # the receiver's answer is not used: read a little, then stop
_SCHEME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")

Outcome = Literal["delivered", "failed", "dropped"]


@dataclass(frozen=True, slots=True)
class PushPolicy:
    """Retry and bound settings (defaults follow the issue: a few attempts, 10 s each)."""

    max_attempts: int = 3
    first_backoff_s: float = 1.0
    max_backoff_s: float = 10.0
    attempt_timeout_s: float = 10.0
    max_delivery_s: float = 60.0
    max_pending: int = 32


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What became of one notification to one webhook (for observers and tests).
    ``detail`` is safe to log: no URL path, query or secret."""

    task_id: str
    config_id: str
    state: int
    outcome: Outcome
    attempts: int
    status: int | None
    detail: str


@dataclass(frozen=True, slots=True)
class _Notification:
    task_id: str
    config_id: str
    state: int
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def __repr__(self) -> str:  # never show the headers (token, credentials)
        return f"_Notification({self.task_id!r}, {self.config_id!r}, {url_label(self.url)})"


_Key = tuple[str, str]  # (task id, config id)


def _header_safe(value: str) -> bool:
    return all(0x20 <= ord(c) < 0x7F or c == "\t" for c in value)


def validate_push_config(
    config: pb.TaskPushNotificationConfig, *, allow_private_urls: bool, prefix: str = ""
) -> None:
    """Raise InvalidParams (naming the field) unless ``config`` can be delivered to:
    the URL passes the guard's static checks, and the token, scheme and credentials
    fit in an HTTP header. The message never contains the token or credentials."""

    def invalid(name: str, description: str) -> InvalidParamsError:
        field = f"{prefix}.{name}" if prefix else name
        return InvalidParamsError(
            f"{field}: {description}", violations=[FieldViolation(field, description)]
        )

    if not config.url:
        raise invalid("url", "is required")
    try:
        check_url(config.url, allow_private_urls=allow_private_urls)
    except OutboundError as exc:
        raise invalid("url", str(exc)) from None
    if len(config.token) > MAX_SECRET_CHARS or not _header_safe(config.token):
        raise invalid("token", f"must be at most {MAX_SECRET_CHARS} printable ASCII characters")
    if config.HasField("authentication"):
        authentication = config.authentication
        if not _SCHEME.fullmatch(authentication.scheme):
            raise invalid("authentication.scheme", "must be an HTTP auth scheme such as Bearer")
        credentials = authentication.credentials
        if len(credentials) > MAX_SECRET_CHARS or not _header_safe(credentials):
            raise invalid(
                "authentication.credentials",
                f"must be at most {MAX_SECRET_CHARS} printable ASCII characters",
            )


async def check_push_destination(
    config: pb.TaskPushNotificationConfig, client: OutboundClient, *, prefix: str = ""
) -> None:
    """At registration, after :func:`validate_push_config`: resolve the webhook's host
    now (bounded by the client's connect timeout) and raise InvalidParams naming the
    ``url`` field when any answer is a forbidden address. A host that cannot be
    resolved now (no answer, a timeout) is accepted: it cannot reach anything yet, and
    delivery checks every connection again (DNS can change)."""
    try:
        await client.check_url_resolved(config.url)
    except OutboundConnectionError:
        return  # unresolvable for now: the connect-time check decides at delivery
    except OutboundError as exc:
        field = f"{prefix}.url" if prefix else "url"
        raise InvalidParamsError(
            f"{field}: {exc}", violations=[FieldViolation(field, str(exc))]
        ) from None


def notification_headers(
    config: pb.TaskPushNotificationConfig, version: str = PROTOCOL_VERSION
) -> dict[str, str]:
    """The headers of a delivery to ``config``'s webhook (registered over ``version``)."""
    legacy = compat03.is_legacy_version(version)
    headers = {"Content-Type": LEGACY_CONTENT_TYPE if legacy else CONTENT_TYPE}
    if config.token:
        headers[TOKEN_HEADER] = config.token
    if config.HasField("authentication") and config.authentication.scheme:
        authentication = config.authentication
        value = f"{authentication.scheme} {authentication.credentials}".rstrip()
        headers["Authorization"] = value
    return headers


def notification_body(task: pb.Task, version: str = PROTOCOL_VERSION) -> bytes:
    """``{"task": <ProtoJSON Task>}``: the StreamResponse a webhook receives; for a
    config registered over A2A 0.3, the bare 0.3 Task."""
    if compat03.is_legacy_version(version):
        return orjson.dumps(compat03.task_out(proto_dict.to_dict(task)))
    return orjson.dumps({"task": proto_dict.to_dict(task)})


class PushDispatcher(AsyncCloseable):
    """Delivers push notifications in order per (task, config); see the module
    docstring. ``on_result`` is called once per notification with its outcome."""

    def __init__(
        self,
        client: OutboundClient,
        *,
        policy: PushPolicy | None = None,
        on_result: Callable[[DeliveryResult], None] | None = None,
    ) -> None:
        self.client = client
        self.policy = policy or PushPolicy()
        self.on_result = on_result
        self._queues: dict[_Key, collections.deque[_Notification]] = {}
        self._workers: dict[_Key, asyncio.Task[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    # --- the engine's side ------------------------------------------------------------

    def notify(
        self,
        task: pb.Task,
        configs: Sequence[pb.TaskPushNotificationConfig],
        versions: Mapping[str, str] | None = None,
    ) -> None:
        """Queue one notification of ``task`` as it is now for each of ``configs``
        (their secrets in plaintext); ``versions`` names, by config id, the A2A version
        a config was registered with when it is not 1.0 (its body and headers follow
        it). Returns at once; never raises for a bad config (it is logged and skipped).
        Must be called from the event loop."""
        if self._closed or not configs:
            return
        bodies: dict[str, bytes] = {}
        state = task.status.state
        for config in configs:
            version = (versions or {}).get(config.id, PROTOCOL_VERSION)
            body = bodies.get(version)
            if body is None:
                body = bodies[version] = notification_body(task, version)
            try:
                validate_push_config(config, allow_private_urls=self.client.allow_private_urls)
            except InvalidParamsError as exc:
                log.warning(
                    "push config %s of task %s skipped: %s", config.id, task.id, exc.message
                )
                self._report(
                    DeliveryResult(task.id, config.id, state, "failed", 0, None, exc.message)
                )
                continue
            named = notification_headers(config, version)
            tracing.inject(named)  # the webhook's side may join the task's trace
            headers = tuple(named.items())
            self._enqueue(_Notification(task.id, config.id, state, config.url, headers, body))

    def forget(self, task_id: str, config_id: str) -> None:
        """Drop the notifications still waiting for this config (it was deleted);
        one already being sent completes."""
        queue = self._queues.get((task_id, config_id))
        if queue is not None:
            queue.clear()

    # --- observation ------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Notifications queued or being sent."""
        return sum(len(q) for q in self._queues.values()) + len(self._workers)

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until nothing is queued or being sent."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    # --- shutdown ---------------------------------------------------------------------

    async def aclose(self, grace_s: float = 2.0) -> None:
        """Accept nothing more; let deliveries finish for ``grace_s``, then cancel the
        rest and wait for the workers to end. The client is not closed (shared)."""
        self._closed = True
        if self._workers:
            await self.wait_idle(grace_s)
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        if workers:
            await asyncio.wait(workers, timeout=max(grace_s, 1.0))
        for queue in self._queues.values():
            for notification in queue:
                self._dropped(notification, "the server shut down")
        self._queues.clear()

    # --- delivery ---------------------------------------------------------------------

    def _enqueue(self, notification: _Notification) -> None:
        key = (notification.task_id, notification.config_id)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = collections.deque()
        if len(queue) >= self.policy.max_pending:
            self._dropped(queue.popleft(), "too many notifications waiting for this webhook")
        queue.append(notification)
        if key not in self._workers:
            self._idle.clear()
            self._workers[key] = asyncio.create_task(
                self._work(key, queue), name=f"a2a-push-{key[0]}-{key[1]}"
            )

    async def _work(self, key: _Key, queue: collections.deque[_Notification]) -> None:
        try:
            while queue:
                await self._deliver(queue.popleft())
        finally:
            # No await between the last check of the queue and here: a notify() that
            # finds this worker registered has already put its item in the queue.
            if not queue:
                self._queues.pop(key, None)
            self._workers.pop(key, None)
            if not self._workers:
                self._idle.set()

    async def _deliver(self, notification: _Notification) -> None:
        policy = self.policy
        loop = asyncio.get_running_loop()
        deadline = loop.time() + policy.max_delivery_s
        where = url_label(notification.url)
        headers = dict(notification.headers)
        attempts = 0
        status: int | None = None
        detail = ""
        while attempts < policy.max_attempts:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            attempts += 1
            retry_after: float | None = None
            try:
                response = await self.client.request(
                    "POST",
                    notification.url,
                    headers=headers,
                    data=notification.body,
                    timeout_s=min(policy.attempt_timeout_s, remaining),
                    max_response_bytes=_RESPONSE_BYTES,
                    truncate=True,
                )
            except OutboundError as exc:
                status, detail = None, str(exc)
                if not exc.retryable:
                    break
            else:
                status = response.status
                detail = f"HTTP {status}"
                if 200 <= status < 300:
                    log.debug(
                        "push to %s delivered (task %s, config %s, attempt %d)",
                        where,
                        notification.task_id,
                        notification.config_id,
                        attempts,
                    )
                    self._report_of(notification, "delivered", attempts, status, detail)
                    return
                if status != 429 and status < 500:
                    break
                retry_after = _retry_after(response.headers.get("Retry-After", ""))
            if attempts >= policy.max_attempts:
                break
            delay = min(policy.max_backoff_s, policy.first_backoff_s * 2 ** (attempts - 1))
            if retry_after is not None:
                delay = min(policy.max_backoff_s, max(delay, retry_after))
            if loop.time() + delay >= deadline:
                break
            log.info(
                "push to %s failed (%s; task %s, config %s, attempt %d), retrying in %.2g s",
                where,
                detail,
                notification.task_id,
                notification.config_id,
                attempts,
                delay,
            )
            await asyncio.sleep(delay)
        log.warning(
            "push to %s given up after %d attempt(s): %s (task %s, config %s)",
            where,
            attempts,
            detail or "no time left",
            notification.task_id,
            notification.config_id,
        )
        self._report_of(notification, "failed", attempts, status, detail or "no time left")

    def _dropped(self, notification: _Notification, why: str) -> None:
        log.warning(
            "push to %s dropped: %s (task %s, config %s)",
            url_label(notification.url),
            why,
            notification.task_id,
            notification.config_id,
        )
        self._report_of(notification, "dropped", 0, None, why)

    def _report_of(
        self,
        notification: _Notification,
        outcome: Outcome,
        attempts: int,
        status: int | None,
        detail: str,
    ) -> None:
        self._report(
            DeliveryResult(
                notification.task_id,
                notification.config_id,
                notification.state,
                outcome,
                attempts,
                status,
                detail,
            )
        )

    def _report(self, result: DeliveryResult) -> None:
        if self.on_result is None:
            return
        try:
            self.on_result(result)
        except Exception:
            log.exception("push result observer failed")

    def __repr__(self) -> str:
        return f"PushDispatcher(pending={self.pending}, closed={self._closed})"


def _retry_after(value: str) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is ignored)."""
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²".isdigit() is True too
        return float(value)
    return None


__all__ = [
    "CONTENT_TYPE",
    "TOKEN_HEADER",
    "DeliveryResult",
    "PushDispatcher",
    "PushPolicy",
    "check_push_destination",
    "notification_body",
    "notification_headers",
    "validate_push_config",
]
