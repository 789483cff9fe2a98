"""Liveness and readiness: ``/healthz``, ``/readyz`` and the gRPC health service.

``/healthz`` answers 200 ``{"status": "ok"}`` whenever the process serves HTTP at all.
``/readyz`` runs the readiness checks (each a named coroutine answering None when
ready, else a short reason) and answers 200 ``{"status": "ready"}`` or 503
``{"status": "not ready", "problems": {name: reason}}``. Reasons are fixed texts
chosen by the checks (never an exception's text: a database error may quote its URL).

A result is reused for :data:`CACHE_S`, so probes (or anyone: the endpoints are not
guarded, like any load balancer's probe target) cannot turn into a query per request;
each check is bounded by :data:`CHECK_TIMEOUT_S`. :meth:`Readiness.follow` calls its
callbacks when readiness changes, which is how the gRPC health service follows it
(:meth:`Readiness.start` re-checks every :data:`POLL_S` so that it does without probes).
:meth:`Readiness.hold` makes it not ready for good, at once (a draining gateway: load
balancers stop sending it calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import orjson
from aiohttp import web

from a2a_gateway.protocol.closing import Startable

log = logging.getLogger(__name__)

#: A readiness check: None when ready, else a short fixed reason.
Check = Callable[[], Awaitable[str | None]]

CACHE_S: Final = 1.0
CHECK_TIMEOUT_S: Final = 2.0
POLL_S: Final = 5.0

HEALTHY_BODY: Final = b'{"status":"ok"}'
READY_BODY: Final = b'{"status":"ready"}'


class Readiness(Startable):
    """Named readiness checks, their last result, and who follows it."""

    def __init__(
        self,
        checks: Mapping[str, Check] | None = None,
        *,
        cache_s: float = CACHE_S,
        interval_s: float = POLL_S,
    ) -> None:
        self.checks: dict[str, Check] = dict(checks or {})
        self.cache_s = cache_s
        self.interval_s = interval_s
        self._followers: list[Callable[[bool], Awaitable[None]]] = []
        self._last: dict[str, str] | None = None
        self._held: dict[str, str] = {}  # problems that stay (hold)
        self._at = 0.0
        self._running: asyncio.Task[dict[str, str]] | None = None
        self._poller: asyncio.Task[None] | None = None

    def add(self, name: str, check: Check) -> None:
        self.checks[name] = check

    def follow(self, callback: Callable[[bool], Awaitable[None]]) -> None:
        """Call ``callback(ready)`` whenever a check changes readiness."""
        self._followers.append(callback)

    async def problems(self) -> dict[str, str]:
        """What is not ready (empty: ready); a result at most ``cache_s`` old."""
        now = asyncio.get_running_loop().time()
        if self._last is not None and now - self._at < self.cache_s:
            return self._last
        running = self._running
        if running is None or running.done():  # concurrent probes share one check
            running = self._running = asyncio.get_running_loop().create_task(self._check())
        return await asyncio.shield(running)

    async def _check(self) -> dict[str, str]:
        names = list(self.checks)
        results = await asyncio.gather(*(_bounded(name, self.checks[name]) for name in names))
        found = {name: why for name, why in zip(names, results, strict=True) if why is not None}
        found.update(self._held)  # read after the checks: a hold during them counts
        was_ready = None if self._last is None else not self._last
        self._last, self._at = found, asyncio.get_running_loop().time()
        ready = not found
        if ready != was_ready:
            if was_ready is not None or not ready:
                log.warning(
                    "readiness: %s", "ready" if ready else f"not ready ({', '.join(found)})"
                )
            for callback in self._followers:
                try:
                    await callback(ready)
                except Exception:
                    log.exception("readiness follower failed")
        return found

    async def hold(self, name: str, reason: str) -> None:
        """Not ready from now on, whatever the checks say (``name``: ``reason``); the
        followers are told before this returns."""
        self._held[name] = reason
        self._at = -math.inf  # the cached answer is stale
        self._running = None  # nor may a check begun before the hold be shared
        await self.problems()

    async def start(self) -> None:
        """Re-check every ``interval_s`` (for followers, without probes): a task of its
        own, while someone follows."""
        if self._poller is None and self._followers:
            self._poller = asyncio.get_running_loop().create_task(
                self._poll(self.interval_s), name="a2a-readiness"
            )

    async def _poll(self, interval_s: float) -> None:
        while True:
            await self.problems()
            await asyncio.sleep(interval_s)

    async def aclose(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller


async def _bounded(name: str, check: Check) -> str | None:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await check()
    except TimeoutError:
        return f"no answer within {CHECK_TIMEOUT_S:g} s"
    except Exception:
        log.exception("readiness check %s failed", name)
        return "the check failed"


READINESS = web.AppKey("a2a_readiness", Readiness)


async def handle_healthz(request: web.Request) -> web.Response:
    return web.Response(body=HEALTHY_BODY, content_type="application/json")


async def handle_readyz(request: web.Request) -> web.Response:
    problems = await request.app[READINESS].problems()
    if not problems:
        return web.Response(body=READY_BODY, content_type="application/json")
    body = orjson.dumps({"status": "not ready", "problems": problems})
    return web.Response(body=body, status=503, content_type="application/json")


def mount(app: web.Application, readiness: Readiness) -> None:
    """``GET /healthz`` and ``GET /readyz`` on ``app``."""
    app[READINESS] = readiness
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)


__all__ = ["READINESS", "Check", "Readiness", "handle_healthz", "handle_readyz", "mount"]
