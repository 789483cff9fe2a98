"""Fixtures for the assistant tests: the scripted provider and a runtime on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from a2a_gateway.agent.provider import ChatProvider, ProviderConfig
from a2a_gateway.agent.runtime import Runtime, RuntimeConfig, TurnEvent
from a2a_gateway.agent.tools import ToolRegistry
from tests.support.clocks import FakeClock

from .fake_llm import FakeLLM

API_KEY = "sk-test-llm-4f2a9c7e1b3d5a6f"


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    fake = FakeLLM()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.aclose()


def make_runtime(
    base_url: str,
    *,
    clock: FakeClock | None = None,
    timeout_s: float = 10.0,
    stream: str = "auto",
    **config: object,
) -> Runtime:
    provider = ChatProvider(
        ProviderConfig(
            model="fake-model",
            base_url=base_url,
            api_key=API_KEY,
            timeout_s=timeout_s,
            max_retries=0,
            stream=stream,
        )
    )
    return Runtime(provider, RuntimeConfig(**config), clock=clock or FakeClock())  # type: ignore[arg-type]


async def run(
    runtime: Runtime,
    workspace: Path,
    text: str,
    *,
    scope: str = "local-owner",
    tools: ToolRegistry | None = None,
    **kwargs: object,
) -> list[TurnEvent]:
    events: list[TurnEvent] = []
    async with asyncio.timeout(15):
        async with contextlib.aclosing(
            runtime.run_turn(scope, workspace, text, tools=tools, **kwargs)  # type: ignore[arg-type]
        ) as stream:
            async for event in stream:
                events.append(event)
    return events
