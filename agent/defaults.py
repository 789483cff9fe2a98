"""The assistant's defaults, stated once: the model client, the turn runtime and the
assistant use them, and so does the command line's settings table, which imports this
module (it imports nothing) without loading the model client.
"""

from __future__ import annotations

# The model provider (provider.ProviderConfig).
#: Where a local Ollama serves its OpenAI-compatible API.
DEFAULT_BASE_URL = "http://127.0.0.1:11434/v1"
DEFAULT_TIMEOUT_S = 60.0  # the provider may stay silent this long (connect, tokens)
DEFAULT_MAX_TOKENS = 0  # 0: the provider's limit
DEFAULT_MAX_RETRIES = 2
STREAM_MODES = ("auto", "on", "off")
DEFAULT_STREAM = "auto"

# The turn runtime (runtime.RuntimeConfig).
DEFAULT_MAX_TOOL_ROUNDS = 16
DEFAULT_CONTEXT_BUDGET_CHARS = 200_000
DEFAULT_IDLE_TIMEOUT_S = 1800.0  # an idle session leaves memory after this
#: How long a secret question waits for the owner's value (its one-time link expires then).
DEFAULT_SECRET_WAIT_S = 600.0

#: How long one owner turn (chat, the Telegram host) may run by default: the engine's
#: bound of an agent's run (``--turn-timeout``).
TURN_TIMEOUT_S = 3600.0

# The assistant (assistant.AssistantConfig).
SESSION_MODES = ("per-context", "per-task", "shared")
DEFAULT_SESSION_MODE = "per-context"
