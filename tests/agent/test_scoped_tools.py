"""PACT's scoped tools in the assistant: a tool a scope opens runs with the user's token
when it is granted, and suspends the turn (auth-required) naming the scope when not;
other tools and turns that are not a PACT user's are left as they are."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from a2a_gateway.agent.assistant import DELEGATION_ARTIFACT, delegated_tools
from a2a_gateway.agent.base import Signal
from a2a_gateway.agent.demo_model import demo_reply
from a2a_gateway.agent.tools import Tool, ToolContext, ToolRegistry, ToolResult
from a2a_gateway.agent.tools.interaction import InputNeeded
from a2a_gateway.protocol.context import OnBehalf

TOKEN = "delegation-token-for-the-scoped-tool-test"


class ShowsBearer(Tool):
    description = "says whether it got a bearer"
    parameters: Mapping[str, Any] = {"type": "object", "properties": {}}

    def __init__(self, name: str) -> None:
        self.name = name

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult("bearer" if context.bearer == TOKEN else "no bearer")


def context(tmp_path: Path) -> ToolContext:
    return ToolContext(tmp_path, "serve-a2a-x_c", "pact.x", 0, Signal())


async def test_granted_tools_get_the_token_and_others_ask(tmp_path: Path) -> None:
    tools = ToolRegistry([ShowsBearer("list_orders"), ShowsBearer("cancel_order")])
    tools.add(ShowsBearer("clock"))
    on_behalf = OnBehalf(
        "https://pa.example",
        "alice",
        account="u-1",
        scopes=frozenset({"orders:read"}),
        tool_scopes=(("list_orders", ("orders:read",)), ("cancel_order", ("orders:cancel",))),
        token=TOKEN,
    )
    assert TOKEN not in repr(on_behalf)
    gated, record = delegated_tools(tools, on_behalf)
    assert record is not None and gated.names() == ["list_orders", "cancel_order", "clock"]
    assert (await gated.get("list_orders").call({}, context(tmp_path))).text == "bearer"  # type: ignore[union-attr]
    assert (await gated.get("clock").call({}, context(tmp_path))).text == "no bearer"  # type: ignore[union-attr]
    with pytest.raises(InputNeeded) as asked:
        await gated.get("cancel_order").call({}, context(tmp_path))  # type: ignore[union-attr]
    assert asked.value.authorization and not asked.value.secret
    assert "orders:cancel" in asked.value.question
    assert (record.ran, record.missing) == (["list_orders"], ["orders:cancel"])
    artifact = record.artifact().artifact
    assert artifact.name == DELEGATION_ARTIFACT
    data = artifact.parts[0].data.struct_value
    assert list(data["toolsRun"]) == ["list_orders"] and list(data["missingScopes"]) == [
        "orders:cancel"
    ]


async def test_without_a_token_every_scoped_tool_asks(tmp_path: Path) -> None:
    tools = ToolRegistry([ShowsBearer("list_orders")])
    on_behalf = OnBehalf("https://pa.example", "alice", tool_scopes=(("list_orders", ("r",)),))
    gated, record = delegated_tools(tools, on_behalf)
    with pytest.raises(InputNeeded):
        await gated.get("list_orders").call({}, context(tmp_path))  # type: ignore[union-attr]
    assert record is not None and record.missing == ["r"]
    # No PACT user, or no scopes configured: the registry as it was.
    assert delegated_tools(tools, None) == (tools, None)
    assert delegated_tools(tools, OnBehalf("https://pa.example", "alice")) == (tools, None)


def test_the_demo_model_uses_a_tool_it_is_offered() -> None:
    offered = {"tools": [{"type": "function", "function": {"name": "list_orders"}}]}
    said = {"role": "user", "content": "[A2A message from someone.]\n\nuse list_orders"}
    assert demo_reply({**offered, "messages": [said]}) == ("", [("list_orders", {})])
    assert demo_reply({"messages": [said]})[0] == "I have no tool named list_orders here."
