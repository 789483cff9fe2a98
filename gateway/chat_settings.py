"""The settings of ``a2a-gateway chat`` (and the delegation settings other owner hosts
share: ``--a2a-wait``, ``--a2a-max-wait``, ``--watch-timeout``)."""

from __future__ import annotations

from dataclasses import replace

from a2a_gateway.client.clock import DEFAULT_MAX_WAIT_S

from .settings import SETTINGS, Setting

DELEGATION_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "a2a_wait",
        float,
        60.0,
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
        86400.0,
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

#: How long one chat turn may run by default (``--turn-timeout``; the engine's bound of
#: an agent's run).
TURN_TIMEOUT_S = 3600.0

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
