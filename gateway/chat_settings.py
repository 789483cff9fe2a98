"""The settings of ``a2a-gateway chat`` (and the delegation settings other owner hosts
share: ``--a2a-wait``, ``--a2a-max-wait``, ``--watch-timeout``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from a2a_gateway.agent.defaults import TURN_TIMEOUT_S
from a2a_gateway.client.clock import DEFAULT_MAX_WAIT_S, DEFAULT_WAIT_S, DEFAULT_WATCH_TIMEOUT_S

from .settings import SETTINGS, LogFormat, LogLevel, ModelSettings, Setting

DELEGATION_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "a2a_wait",
        float,
        DEFAULT_WAIT_S,
        "seconds the a2a tool's send waits for a result before a watch takes over"
        " (0: hand over at once)",
        minimum=0,
    ),
    Setting(
        "a2a_max_wait",
        float,
        DEFAULT_MAX_WAIT_S,
        "seconds a foreground send, or the a2a tool's wait action, waits at most before a"
        " watch takes over",
        above=0,
    ),
    Setting(
        "watch_timeout",
        float,
        DEFAULT_WATCH_TIMEOUT_S,
        "seconds after its start a watch gives up with a (no result) notice",
        above=0,
    ),
)

#: ``serve`` settings chat uses: the model and sessions, the outbound guard, the file
#: cap, logging, and where the push receiver listens (only with --public-url).
_FROM_SERVE = frozenset(
    {
        "host",
        "port",
        "public_url",
        "allow_private_urls",
        "otlp_endpoint",
        "max_file_bytes",
        "session_idle_timeout",
        "log_level",
        "log_format",
    }
)


#: ``--turn-timeout`` of the owner hosts (chat and the Telegram host).
TURN_TIMEOUT_SETTING = Setting(
    "turn_timeout",
    float,
    TURN_TIMEOUT_S,
    "seconds one turn (a message, or a delivered result) may run before it is stopped",
    above=0,
)

#: ``--llm-model`` in the owner hosts (chat, telegram): always the assistant, no --llm.
LLM_MODEL_HELP = "model name (required, unless --llm-demo)"

#: What those settings mean for chat, where serve's help would say card and gRPC.
_CHAT_HELP = {
    "host": "address the push receiver listens on (only with --public-url)",
    "port": "port the push receiver listens on (only with --public-url)",
    "public_url": "external base URL of the push receiver: with it, watches of agents"
    " that push are woken by their pushes",
    "llm_model": LLM_MODEL_HELP,
    "log_format": "plain or json (json: a JSON object a line)",
}

CHAT_SETTINGS: tuple[Setting, ...] = (
    Setting("workspace", str, "", "the owner's workspace folder (required)"),
    TURN_TIMEOUT_SETTING,
    *DELEGATION_SETTINGS,
    *(
        replace(s, help=_CHAT_HELP.get(s.name, s.help))
        for s in SETTINGS
        if s.name in _FROM_SERVE or s.name.startswith("llm_")
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatSettings(ModelSettings):
    """``chat``'s settings, resolved: one field per setting of :data:`CHAT_SETTINGS`."""

    TABLE: ClassVar[tuple[Setting, ...]] = CHAT_SETTINGS
    SECTION: ClassVar[str] = "chat"

    workspace: str
    turn_timeout: float
    a2a_wait: float
    a2a_max_wait: float
    watch_timeout: float
    host: str
    port: int
    public_url: str
    allow_private_urls: bool
    max_file_bytes: int
    otlp_endpoint: str
    log_format: LogFormat
    log_level: LogLevel
