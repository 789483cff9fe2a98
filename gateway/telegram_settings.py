"""The settings of ``a2a-gateway telegram`` (kept apart from the host, so building the
command line never imports python-telegram-bot)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from .chat_settings import DELEGATION_SETTINGS, LLM_MODEL_HELP, TURN_TIMEOUT_SETTING
from .settings import SETTINGS, HostSettings, Setting

#: The public Bot API (python-telegram-bot adds ``/bot<token>`` and ``/file/bot<token>``).
DEFAULT_BASE_URL = "https://api.telegram.org"

TOKEN_VARIABLE = "TELEGRAM_BOT_TOKEN"
ALLOWED_VARIABLE = "TELEGRAM_ALLOWED_USER_IDS"

#: ``serve`` settings that make no sense for the bot (it always hosts the assistant
#: over its chats' folders; ``upstream*``, proxy mode, is left out too).
_SERVE_ONLY = frozenset(
    {
        "workspace",
        "agent",
        "exec",
        "faux",
        "llm",
        "allow_anonymous",
    }
)

TELEGRAM_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "allowed_users",
        str,
        "",
        f"comma-separated Telegram user ids that may talk to the bot (or {ALLOWED_VARIABLE})",
    ),
    Setting(
        "telegram_base_url",
        str,
        DEFAULT_BASE_URL,
        "Bot API base URL (a self-hosted Bot API server)",
    ),
    Setting(
        "telegram_webhook_url",
        str,
        "",
        "receive updates by webhook at this public URL (served on --host/--port)"
        " instead of long polling",
    ),
    Setting("a2a", bool, False, "also serve A2A over the chats' workspaces"),
    Setting(
        "a2a_client",
        bool,
        True,
        "give the owner's chats the a2a tool (call the agents of the chat's agents.json)",
    ),
    TURN_TIMEOUT_SETTING,
    *DELEGATION_SETTINGS,
    Setting(
        "time_zone",
        str,
        "UTC",
        "IANA time zone of follow-up headers (a chat may set its own with /tz)",
    ),
)
#: The bot's own settings, then every ``serve`` setting that applies to it (a name the
#: bot defines itself is not taken twice).
TELEGRAM_SETTINGS = TELEGRAM_SETTINGS + tuple(
    replace(s, help=LLM_MODEL_HELP) if s.name == "llm_model" else s
    for s in SETTINGS
    if s.name not in _SERVE_ONLY
    and not s.name.startswith("upstream")
    and s.name not in {own.name for own in TELEGRAM_SETTINGS}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramSettings(HostSettings):
    """``telegram``'s settings, resolved: one field per setting of :data:`TELEGRAM_SETTINGS`."""

    TABLE: ClassVar[tuple[Setting, ...]] = TELEGRAM_SETTINGS
    SECTION: ClassVar[str] = "telegram"

    allowed_users: str
    telegram_base_url: str
    telegram_webhook_url: str
    a2a: bool
    a2a_client: bool
    turn_timeout: float
    a2a_wait: float
    a2a_max_wait: float
    watch_timeout: float
    time_zone: str
