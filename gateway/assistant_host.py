"""``serve --llm``: the LLM assistant built from settings (``serve`` is the host with no
owner: ``notify_owner`` appends to the workspace's ``.a2a/owner-inbox.jsonl``).

The API key comes from ``A2A_GATEWAY_LLM_API_KEY``, else ``OPENAI_API_KEY``; it is
never a flag and never logged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from a2a_gateway.agent.assistant import AssistantAgent, AssistantConfig
from a2a_gateway.agent.demo_model import DEMO_BASE_URL, DEMO_MODEL, demo_client
from a2a_gateway.agent.provider import ChatProvider, ProviderConfig
from a2a_gateway.agent.runtime import Runtime, RuntimeConfig
from a2a_gateway.agent.tools.base import Tool
from a2a_gateway.agent.tools.interaction import InboxNotifier, OwnerNotifier, SecretAsker
from a2a_gateway.client.a2a_tool import A2ATool
from a2a_gateway.client.watches import WatchRegistry
from a2a_gateway.local.redaction import register_secret

from .settings import ModelSettings, ServeSettings
from .startup import StartupError

log = logging.getLogger("a2a_gateway.serve")

#: The settings a model runtime is built from: every verb that hosts the assistant.

KEY_VARIABLES = ("A2A_GATEWAY_LLM_API_KEY", "OPENAI_API_KEY")
#: Without a model (chat, telegram; serve says "--llm needs ...").
MODEL_REQUIRED = "--llm-model is required (the model name the provider knows), or --llm-demo"


def llm_api_key(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    for name in KEY_VARIABLES:
        if environ.get(name):
            return environ[name]
    return ""


def build_runtime(settings: ModelSettings) -> Runtime:
    """The provider and the turn runtime from the ``--llm-*`` and ``--session-*``
    settings (StartupError when no model is named and the demo model is not asked for)."""
    if settings.llm_demo:
        config = ProviderConfig(
            model=DEMO_MODEL, base_url=DEMO_BASE_URL, stream=settings.llm_stream
        )
        provider = ChatProvider(config, http_client=demo_client(settings.llm_timeout))
        log.info("assistant: the demo model (a few rules, not a language model)")
    else:
        provider = _model_provider(settings)
    runtime = Runtime(
        provider,
        RuntimeConfig(
            max_tool_rounds=settings.llm_max_tool_rounds,
            context_budget_chars=settings.llm_context_budget,
            idle_timeout_s=settings.session_idle_timeout,
            sweep_interval_s=min(60.0, settings.session_idle_timeout / 2),
            secret_wait_s=settings.llm_secret_wait,
        ),
    )
    runtime.on_secret = register_secret  # a value the owner gives never reaches a log
    return runtime


def _model_provider(settings: ModelSettings) -> ChatProvider:
    if not settings.llm_model:
        raise StartupError(MODEL_REQUIRED)
    api_key = llm_api_key()
    register_secret(api_key)
    provider = ChatProvider(
        ProviderConfig(
            model=settings.llm_model,
            base_url=settings.llm_base_url,
            api_key=api_key,
            timeout_s=settings.llm_timeout,
            max_tokens=settings.llm_max_tokens,
            temperature=settings.llm_temperature,
            max_retries=settings.llm_max_retries,
            stream=settings.llm_stream,
        )
    )
    log.info("assistant: model %s at %s", settings.llm_model, provider.config.public_url())
    return provider


def build_assistant(
    settings: ServeSettings,
    workspaces: list[Path],
    *,
    runtime: Runtime | None = None,
    notifier: OwnerNotifier | None = None,
    scope_prefix: str = "serve",
    local_time: Callable[[Path], str] | None = None,
    extra_tools: Sequence[Tool] = (),
    secrets: SecretAsker | None = None,
) -> AssistantAgent:
    """The assistant for inbound A2A callers (StartupError for a setting that cannot
    work). ``serve --llm`` builds its own runtime and notifies through the workspace's
    owner inbox (secret questions: the gateway's one-time links); the Telegram host
    passes its runtime, its chat notifier and secret asker and the
    ``telegram-{workspace}`` scope prefix."""
    others = {"agent": settings.agent, "exec": settings.exec, "upstream": settings.upstream}
    for other, value in others.items():
        if value:
            raise StartupError(f"--llm and --{other} cannot be used together")
    if runtime is None and not settings.llm_model and not settings.llm_demo:
        raise StartupError(
            "--llm needs --llm-model (the model name the provider knows) or --llm-demo"
        )
    if not workspaces:
        raise StartupError("--llm needs a --workspace (sessions and files live there)")
    try:
        config = AssistantConfig(
            session_mode=settings.session_mode,
            message_template=settings.message_template,
            max_file_bytes=settings.max_file_bytes,
            scope_prefix=scope_prefix,
        )
    except ValueError as exc:
        raise StartupError(f"--message-template: {exc}") from None
    if runtime is None:
        runtime = build_runtime(settings)
    log.info("assistant sessions: %s", settings.session_mode)
    return AssistantAgent(
        runtime,
        config,
        default_workspace=workspaces[0],
        notifier=notifier if notifier is not None else InboxNotifier(),
        local_time=local_time,
        extra_tools=extra_tools,
        secrets=secrets,
        delegating_tools=[inbound_a2a_tool(settings)],
    )


def inbound_a2a_tool(settings: ServeSettings) -> A2ATool:
    """The ``a2a`` tool of the turns of callers whose callers.json entry says
    ``"delegate": true`` (and of no one else's): the workspace's agents.json, no watches
    (a task still running when the wait ends is reported so, to be waited on again)."""
    allow_private = settings.allow_private_urls
    return A2ATool(
        WatchRegistry(allow_private_urls=allow_private),
        allow_private_urls=allow_private,
        max_file_bytes=settings.max_file_bytes,
        inbound=True,
    )
