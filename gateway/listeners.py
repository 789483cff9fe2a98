"""The listening sockets of a host as parts (:class:`~a2a_gateway.protocol.closing.Startable`).

:class:`HttpListener` is an aiohttp app on ``host:port``: its start binds (a port that
cannot be used is the start-up mistake naming the flag that chose it), its close ends
the connections. :class:`GrpcListener` is the gateway's grpc.aio server: its start binds
(so that with port 0 the card can advertise the real port before the HTTP app is built),
:meth:`GrpcListener.serve` starts serving, :meth:`GrpcListener.drain` begins grpc's own
graceful stop. Each closes what its start opened, also when that start failed.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from aiohttp import web

from a2a_gateway.protocol.closing import Startable
from a2a_gateway.server.config import ServerConfig
from a2a_gateway.server.http_app import AppRunner

from .startup import bind_failure

#: What a stop gives calls still in flight once the runs have ended (their answers
#: being written) before it closes their connections.
STOP_GRACE_S = 1.0


class HttpListener(Startable):
    """``app()``'s app served on ``host:port`` (0: any free port; :attr:`port` once
    started), by ``runner`` (aiohttp's ``AppRunner`` or a subclass)."""

    def __init__(
        self,
        app: Callable[[], web.Application],
        host: str,
        port: int,
        *,
        flag: str = "--port",
        ssl_context: Callable[[], ssl.SSLContext | None] = lambda: None,
        runner: type[web.AppRunner] = web.AppRunner,
        **runner_args: Any,
    ) -> None:
        self._app = app
        self.host = host
        self.port = port
        self.flag = flag
        self._ssl_context = ssl_context
        self._runner_class = runner
        self._runner_args = runner_args
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        if self.runner is not None:
            return
        # No access log: a line per request costs throughput and the bindings log what
        # matters (errors, refused callers) themselves.
        self.runner = self._runner_class(
            self._app(), handle_signals=False, access_log=None, **self._runner_args
        )
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port, ssl_context=self._ssl_context())
        try:
            await site.start()
        except OSError as exc:
            raise bind_failure(exc, self.host, self.port, self.flag) from None
        self.port = int(self.runner.addresses[0][1])

    async def drain(self) -> None:
        """Stop accepting connections; the open ones stay (the gateway's runner also
        closes each after its next answer: ``server/http_app.AppRunner.drain``)."""
        runner = self.runner
        if isinstance(runner, AppRunner):
            await runner.drain()
        elif runner is not None:
            for site in list(runner.sites):
                await site.stop()

    async def aclose(self) -> None:
        runner, self.runner = self.runner, None
        if runner is not None:
            await runner.cleanup()


class GrpcListener(Startable):
    """The gateway's gRPC server (``server/grpc_server.py``), made by ``build`` and bound
    to ``config.host:config.grpc_port`` by :meth:`start` (nothing when that is None),
    which writes the port it got back into ``config`` (the card advertises it)."""

    def __init__(
        self, build: Callable[[], Awaitable[tuple[grpc.aio.Server, int]]], config: ServerConfig
    ) -> None:
        self._build = build
        self.config = config
        self.server: grpc.aio.Server | None = None
        self.port: int | None = None
        self._serving = False
        self._stopping: asyncio.Future[None] | None = None  # the drain's graceful stop

    async def start(self) -> None:
        config = self.config
        if self.server is not None or config.grpc_port is None:
            return
        try:
            self.server, self.port = await self._build()
        except OSError as exc:
            raise bind_failure(exc, config.host, config.grpc_port, "--grpc-port") from None
        config.grpc_port = self.port

    async def serve(self) -> None:
        """Serve on the bound port."""
        if self.server is not None and not self._serving:
            self._serving = True
            await self.server.start()

    def drain(self, grace_s: float) -> None:
        """grpc's own graceful stop: no new connection, GOAWAY on the open ones (their
        clients' new calls fail UNAVAILABLE), rpcs in flight go on for ``grace_s``. It
        ends when they have; :meth:`aclose` ends it sooner."""
        if self.server is not None and self._stopping is None:
            self._stopping = asyncio.ensure_future(self.server.stop(grace_s))

    async def aclose(self) -> None:
        server, self.server = self.server, None
        if server is not None and not self._serving:
            # grpc.aio stops a server that never started without releasing its port
            # (measured: it stays bound until the process ends): serve, then stop at once.
            await server.start()
            await server.stop(None)
        elif server is not None:
            await server.stop(STOP_GRACE_S)  # also ends the drain's graceful stop
        self._serving = False
        stopping, self._stopping = self._stopping, None
        if stopping is not None:  # done now: the stop above resolved what it waits for
            await asyncio.wait({stopping}, timeout=STOP_GRACE_S)
            stopping.cancel()
            await asyncio.gather(stopping, return_exceptions=True)
