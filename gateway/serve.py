"""``a2a-gateway serve``: wire the service, the bindings and the lifecycle together.

One process runs the aiohttp server (card, JSON-RPC, HTTP+JSON, SSE) and the grpc.aio
server over one :class:`~a2a_gateway.protocol.service.A2AService`. SIGTERM or SIGINT
stops accepting, ends open streams, cancels runs (their tasks are written in a final
state) and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import grpc
from aiohttp import web

from a2a_gateway.agent.base import Agent
from a2a_gateway.agent.faux import FauxAgent
from a2a_gateway.agent.loader import load_agent
from a2a_gateway.agent.process import ProcessAgent
from a2a_gateway.server.auth import AllowAnonymous, Authenticator, WorkspaceCallers
from a2a_gateway.server.card import CardProvider
from a2a_gateway.server.config import CardConfig, Mounts, ServerConfig
from a2a_gateway.server.engine import TaskEngine
from a2a_gateway.server.file_store import WorkspaceTaskStore
from a2a_gateway.server.grpc_server import build_grpc_server
from a2a_gateway.server.http_app import build_http_app
from a2a_gateway.server.task_store import MemoryTaskStore, TaskStore

from .settings import Settings

log = logging.getLogger("a2a_gateway.serve")


def _mount(path: str) -> str:
    path = path.strip()
    if path in ("", "/"):
        return ""
    return "/" + path.strip("/")


def server_config(settings: Settings) -> ServerConfig:
    workspaces = [Path(p) for p in settings["workspace"]]
    root = settings["workspaces_root"]
    if root:
        workspaces += sorted(p for p in Path(root).iterdir() if p.is_dir())
    grpc_port = settings["grpc_port"]
    jsonrpc = _mount(settings["jsonrpc_path"]) or "/"
    return ServerConfig(
        host=settings["host"],
        port=settings["port"],
        grpc_port=None if grpc_port < 0 else grpc_port,
        public_url=settings["public_url"].rstrip("/"),
        mounts=Mounts(jsonrpc=jsonrpc, rest=_mount(settings["rest_path"])),
        card=CardConfig(name=settings["name"], description=settings["description"]),
        workspaces=workspaces,
        allow_anonymous=settings["allow_anonymous"],
        allow_private_urls=settings["allow_private_urls"],
        keepalive_interval_s=settings["keepalive"],
        max_hops=settings["max_hops"],
    )


def build_agent(settings: Settings) -> Agent:
    if settings["agent"]:
        return load_agent(settings["agent"])
    if settings["exec"]:
        return ProcessAgent(settings["exec"])
    return FauxAgent()


def build_store(settings: Settings, config: ServerConfig) -> TaskStore:
    if settings["store"] == "memory" or not config.workspaces:
        return MemoryTaskStore()
    for workspace in config.workspaces:
        workspace.mkdir(parents=True, exist_ok=True)
    return WorkspaceTaskStore(config.workspaces[0], fsync=settings["fsync"])


def build_authenticator(config: ServerConfig) -> Authenticator:
    if not config.workspaces:
        # No workspace, so no callers.json can exist: the zero-configuration default
        # serves anonymous callers, and the CLI only allows that on loopback.
        return AllowAnonymous()
    return WorkspaceCallers(config.workspaces, allow_anonymous=config.allow_anonymous)


class Gateway:
    """The whole server in one process: start, then stop (idempotent)."""

    def __init__(self, settings: Settings) -> None:
        self.config = server_config(settings)
        self.cards = CardProvider(self.config)
        self.engine = TaskEngine(
            build_agent(settings),
            build_store(settings, self.config),
            max_hops=self.config.max_hops,
            extended_card=self.cards.extended_card,
        )
        self.authenticator = build_authenticator(self.config)
        self._runner: web.AppRunner | None = None
        self._grpc: grpc.aio.Server | None = None
        self.http_port: int | None = None
        self.grpc_port: int | None = None

    async def start(self) -> None:
        config = self.config
        if config.grpc_port is not None:
            # Bind gRPC first: with port 0 the card must advertise the real port.
            self._grpc, self.grpc_port = await build_grpc_server(
                self.engine, config, self.authenticator
            )
            config.grpc_port = self.grpc_port
        app = build_http_app(self.engine, config, self.authenticator, self.cards)
        self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=config.shutdown_grace_s
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, config.host, config.port)
        await site.start()
        self.http_port = int(self._runner.addresses[0][1])
        if self._grpc is not None:
            await self._grpc.start()
        log.info(
            "serving on http://%s:%s (JSON-RPC %s, HTTP+JSON %s)%s",
            config.host,
            self.http_port,
            config.mounts.jsonrpc,
            config.mounts.rest or "/",
            f", gRPC {config.host}:{self.grpc_port}" if self.grpc_port is not None else "",
        )

    async def stop(self) -> None:
        """Stop accepting, end streams, cancel runs (tasks end in a final state)."""
        log.info("shutting down")
        await self.engine.aclose()
        if self._grpc is not None:
            await self._grpc.stop(self.config.shutdown_grace_s)
            self._grpc = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def run_server(settings: Settings, *, stop: asyncio.Event | None = None) -> int:
    gateway = Gateway(settings)
    await gateway.start()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await gateway.stop()
    return 0
