"""What the owner hosts (``chat``, ``telegram``) build the same way from their settings.

An owner host is the assistant of one person (a terminal, a Telegram chat) who also
calls other agents: it needs the assistant's runtime, the watch registry that follows
the remote tasks the ``a2a`` tool hands over, the tool itself, and a push receiver
(``POST /a2a/push/{watchId}``) where agents that push wake their watches. Each host
opens them with its own :class:`contextlib.AsyncExitStack` (``runtime`` and
``watches`` are async context managers; :meth:`OwnerKit.receiver` is a listener).
"""

from __future__ import annotations

from a2a_gateway.agent.runtime import Runtime
from a2a_gateway.client.a2a_tool import A2ATool
from a2a_gateway.client.watches import WatchRegistry
from a2a_gateway.server.push_receiver import build_push_app

from .assistant_host import build_runtime
from .chat_settings import ChatSettings
from .listeners import HttpListener
from .telegram_settings import TelegramSettings

#: How long the push receiver gives a request in flight when it closes.
RECEIVER_SHUTDOWN_S = 1.0


class OwnerKit:
    """The runtime, the watches (pushes reach them at ``public_url``, None: they
    subscribe or poll) and the ``a2a`` tool over them, from ``settings``."""

    def __init__(
        self, settings: ChatSettings | TelegramSettings, *, public_url: str | None
    ) -> None:
        self.settings = settings
        self.runtime: Runtime = build_runtime(settings)
        self.watches = WatchRegistry(
            public_url=public_url,
            allow_private_urls=settings.allow_private_urls,
            watch_timeout_s=settings.watch_timeout,
            max_file_bytes=settings.max_file_bytes,
        )
        self.a2a_tool = A2ATool(
            self.watches,
            wait_s=settings.a2a_wait,
            max_wait_s=settings.a2a_max_wait,
            allow_private_urls=settings.allow_private_urls,
            max_file_bytes=settings.max_file_bytes,
        )

    def receiver(self) -> HttpListener:
        """The push receiver alone on ``--host``/``--port`` (a host that serves no A2A
        app of its own; one that does mounts it there: ``Gateway(push_waker=...)``)."""
        settings = self.settings
        return HttpListener(
            lambda: build_push_app(self.watches),
            settings.host,
            settings.port,
            shutdown_timeout=RECEIVER_SHUTDOWN_S,
        )
