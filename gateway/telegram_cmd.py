"""``a2a-gateway telegram``: the owner's assistant as a Telegram bot, A2A on the side.

Each allowed user's private chat is an owner with a workspace, ``<root>/<chatId>/``.
The bot token comes from ``TELEGRAM_BOT_TOKEN`` only (never a flag, never logged).
With ``--a2a`` the same process serves A2A over ``--workspaces-root``: callers listed in
a chat's ``.a2a/callers.json`` reach that chat's workspace in isolated sessions (scope
prefix ``telegram-<chatId>``), on the same model, and their ``notify_owner`` lands in
the chat. Without ``--a2a`` no HTTP listener is opened, unless updates come by webhook
(``--telegram-webhook-url``), which is then served on ``--host``/``--port`` (with the
A2A routes when ``--a2a`` is on: one process, one port).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web
from telegram.error import InvalidToken, NetworkError, TelegramError

from a2a_gateway.agent.assistant import AssistantAgent
from a2a_gateway.agent.runtime import Runtime
from a2a_gateway.agent.tools import ToolRegistry
from a2a_gateway.agent.tools.files import workspace_tools
from a2a_gateway.agent.tools.interaction import SecretQuestion
from a2a_gateway.client.watches import Deliver
from a2a_gateway.local.redaction import redact, register_secret
from a2a_gateway.protocol.closing import Startable
from a2a_gateway.server.metrics import Metrics
from a2a_gateway.telegram import TelegramConfig, TelegramHost
from a2a_gateway.telegram.access import parse_user_ids
from a2a_gateway.telegram.host import valid_zone
from a2a_gateway.telegram.status import recent_tasks, status_report

from .assistant_host import MODEL_REQUIRED, build_assistant
from .listeners import HttpListener
from .owner_kit import OwnerKit
from .serve import Gateway, until_signalled
from .settings import ServeSettings, build
from .startup import StartupError
from .telegram_settings import ALLOWED_VARIABLE, TOKEN_VARIABLE, TelegramSettings

log = logging.getLogger("a2a_gateway.telegram")


def check(settings: TelegramSettings, environ: Mapping[str, str] | None = None) -> TelegramConfig:
    """The host's configuration, or a :class:`StartupError` saying what is missing."""
    environ = os.environ if environ is None else environ
    token = environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        raise StartupError(
            f"set {TOKEN_VARIABLE} to the bot's token (from BotFather); it is never a flag"
        )
    register_secret(token)
    allowed_text = settings.allowed_users or environ.get(ALLOWED_VARIABLE, "")
    try:
        allowed = parse_user_ids(allowed_text)
    except ValueError as exc:
        raise StartupError(f"--allowed-users: {exc}") from None
    if not allowed:
        raise StartupError(
            f"--allowed-users (or {ALLOWED_VARIABLE}) must list at least one Telegram user id"
        )
    if not settings.workspaces_root:
        raise StartupError("--workspaces-root is required (one folder per chat is made there)")
    if not settings.llm_model and not settings.llm_demo:
        raise StartupError(MODEL_REQUIRED)
    if not valid_zone(settings.time_zone):
        raise StartupError(
            f"--time-zone: unknown time zone {settings.time_zone!r}"
            " (an IANA name such as Europe/Lisbon)"
        )
    webhook = settings.telegram_webhook_url
    if webhook and urlsplit(webhook).scheme != "https":
        raise StartupError("--telegram-webhook-url must be an https URL (Telegram requires it)")
    root = Path(settings.workspaces_root).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create --workspaces-root {root}: {exc.strerror}") from None
    return TelegramConfig(
        token=token,
        allowed_users=frozenset(allowed),
        workspaces_root=root.resolve(),
        base_url=settings.telegram_base_url,
        webhook_url=webhook,
        time_zone=settings.time_zone,
        max_file_bytes=settings.max_file_bytes,
        turn_timeout_s=settings.turn_timeout,
    )


class TelegramNotifier:
    """``notify_owner`` from an inbound caller: ``<caller>: <text>`` in the owner's chat
    (the chat id is the workspace folder's name)."""

    def __init__(self) -> None:
        self.host: TelegramHost | None = None

    async def notify(self, workspace: Path, caller: str | None, text: str) -> None:
        if self.host is None or not workspace.name.lstrip("-").isdigit():
            log.warning("notify_owner: no chat for workspace %s", workspace.name)
            return
        await self.host.notify_owner(int(workspace.name), caller or "assistant", text)


class TelegramSecretAsker:
    """A secret question of an inbound caller: asked in the owner's chat (the chat id
    is the workspace folder's name), the reply to it is the value."""

    def __init__(self) -> None:
        self.host: TelegramHost | None = None

    async def ask_secret(self, question: SecretQuestion) -> str | None:
        workspace = question.workspace
        if self.host is None or not workspace.name.lstrip("-").isdigit():
            log.warning("secret question: no chat for workspace %s", workspace.name)
            return None
        return await self.host.ask_secret(
            int(workspace.name), question.caller, question.question, question.wait_s
        )


class TelegramApp(Startable):
    """The bot, its runtime and (with ``--a2a`` or a webhook) the HTTP side."""

    def __init__(self, settings: TelegramSettings, config: TelegramConfig) -> None:
        self.settings = settings
        self.config = config
        # Push needs the receiver (the A2A side's app) reachable at a public URL.
        push_url = settings.public_url if settings.a2a and settings.public_url else None
        kit = OwnerKit(settings, public_url=push_url)
        self.runtime: Runtime = kit.runtime
        self.watches = kit.watches
        self.a2a_tool = kit.a2a_tool if settings.a2a_client else None
        self.host = TelegramHost(
            config, self.runtime, tools_for=self.owner_tools, status=self.status
        )
        self.gateway: Gateway | None = None
        self.http_port: int | None = None
        self._stack: contextlib.AsyncExitStack | None = None  # what start opened

    def owner_tools(self, chat_id: int, workspace: Path) -> ToolRegistry:
        """The tools of an owner chat: the workspace's files, send_file and (client on)
        the a2a tool."""
        tools = ToolRegistry(workspace_tools(send_cap=self.config.max_file_bytes))
        if self.a2a_tool is not None:
            tools.add(self.a2a_tool)
        return tools

    async def _arm_chats(self) -> None:
        """Each allowed chat receives its watch results as follow-ups; its kept results
        and pending watches come back (in the background: start-up does not wait). A
        chat that is no longer allowed keeps its records untouched."""
        for chat_id in sorted(self.config.allowed_users):
            workspace = self.host.workspace(chat_id).resolve()
            self.watches.register_target(
                workspace, self.host.scope(chat_id), self._deliverer(chat_id)
            )
            self.watches.restore(workspace)

    def _deliverer(self, chat_id: int) -> Deliver:
        async def deliver(scope: str, text: str) -> None:
            # Taken once its turn has run: a bot stopped before keeps the record.
            ran = self.host.follow_up(chat_id, text, label="a2a result")
            if ran is None:
                raise RuntimeError(f"chat {chat_id} cannot take a follow-up now")
            if not await ran:
                raise RuntimeError(f"chat {chat_id}: the bot stopped before the follow-up ran")

        return deliver

    def _chat_local_time(self, workspace: Path) -> str:
        """The owning chat's local time, for its inbound callers' sessions."""
        chat = workspace.name
        # A folder that is not a chat's has no zone of its own: the host's applies.
        return self.host.local_time(int(chat) if chat.lstrip("-").isdigit() else 0)

    async def status(self, chat_id: int, workspace: Path) -> str:
        """``/a2a``: the chat's agents, watches and callers (keys never in full)."""
        store = self.gateway.store if self.gateway is not None else None
        recent = await recent_tasks(store, workspace) if store is not None else {}
        return await asyncio.to_thread(
            status_report, workspace, client_on=self.a2a_tool is not None, recent=recent
        )

    def _webhook_path(self) -> str:
        return urlsplit(self.config.webhook_url).path or "/"

    def _add_routes(self, app: web.Application) -> None:
        if self.config.webhook_url:
            app.router.add_post(self._webhook_path(), self.host.webhook_route)

    def _a2a_side(self) -> Gateway:
        """``--a2a``: the gateway serving the chats' folders to their callers, on the
        bot's runtime, with the webhook's route and the push receiver."""
        notifier = TelegramNotifier()
        notifier.host = self.host
        asker = TelegramSecretAsker()
        asker.host = self.host
        serve_settings = _serve_settings(self.settings, self.config)
        agent: AssistantAgent = build_assistant(
            serve_settings,
            [self.config.workspaces_root],
            runtime=self.runtime,
            notifier=notifier,
            scope_prefix="telegram-{workspace}",
            local_time=self._chat_local_time,
            secrets=asker,
        )
        gateway = Gateway(
            serve_settings,
            agent=agent,
            routes=self._add_routes,
            push_waker=self.watches,
        )
        if isinstance(gateway.metrics, Metrics):  # --metrics: the watches too
            self.watches.meter = gateway.metrics.watches
            gateway.metrics.watches.count_pending(self.watches)
        return gateway

    def _webhook_app(self) -> web.Application:
        app = web.Application()
        self._add_routes(app)
        return app

    async def start(self) -> None:
        """Open the parts in order; one that fails closes those opened before it (in
        reverse) and its error goes on. They close in reverse: the watches (their
        records stay for the next start), the bot, the HTTP side (the gateway's runs
        end first), the runtime."""
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.runtime)
            if self.settings.a2a:
                self.gateway = self._a2a_side()
                await stack.enter_async_context(self.gateway)
                self.http_port = self.gateway.http_port
            elif self.config.webhook_url:
                host, port = self.settings.host, self.settings.port
                webhook = HttpListener(self._webhook_app, host, port)
                await stack.enter_async_context(webhook)
                self.http_port = webhook.port
            await stack.enter_async_context(self.host)
            await stack.enter_async_context(self.watches)
            if self.a2a_tool is not None:
                await self._arm_chats()
            self._stack = stack.pop_all()

    async def aclose(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def stop(self) -> None:
        await self.aclose()


def _serve_settings(settings: TelegramSettings, config: TelegramConfig) -> ServeSettings:
    """The ``serve`` settings of the A2A side: the chats' folders as workspaces (a serve
    setting the bot does not have takes its default)."""
    values: dict[str, object] = {f.name: getattr(settings, f.name) for f in fields(settings)}
    values.update(
        llm=True, workspaces_root=str(config.workspaces_root), workspace=(), allow_anonymous=False
    )
    return build(ServeSettings, values)


def bot_api_problem(exc: TelegramError, base_url: str) -> str:
    """Why the Bot API would not start the bot, in one line without the token
    (python-telegram-bot's own texts quote it: InvalidToken does, whole)."""
    if isinstance(exc, InvalidToken):
        return f"the Telegram Bot API at {base_url} rejected the token in {TOKEN_VARIABLE}"
    if isinstance(exc, NetworkError):  # also TimedOut
        return f"cannot reach the Telegram Bot API at {base_url}: {redact(exc.message)}"
    return f"the Telegram Bot API refused to start the bot: {redact(exc.message)}"


async def run_telegram(settings: TelegramSettings, *, stop: asyncio.Event | None = None) -> int:
    config = check(settings)
    app = TelegramApp(settings, config)
    try:
        await app.start()  # one that fails leaves nothing open
    except OSError as exc:
        raise StartupError(f"cannot start: {exc.strerror or exc}") from None
    except TelegramError as exc:
        raise StartupError(bot_api_problem(exc, config.base_url)) from None
    try:
        await until_signalled(stop)
    finally:
        await app.stop()
    return 0
