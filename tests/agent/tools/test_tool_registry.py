"""The tool registry: names, specs in OpenAI's shape, duplicates refused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from a2a_gateway.agent.tools import Tool, ToolContext, ToolRegistry, ToolResult


class Echo(Tool):
    name = "echo"
    description = "Say it back."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }

    async def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(str(arguments["text"]))


def test_specs_are_openai_function_tools() -> None:
    registry = ToolRegistry([Echo()])
    assert registry.specs() == [
        {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Say it back.",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            },
        }
    ]
    assert "echo" in registry and registry.get("echo") is not None
    assert registry.get("nope") is None
    assert ToolRegistry().specs() == []


def test_duplicate_names_refused_and_copy_is_independent() -> None:
    registry = ToolRegistry([Echo()])
    with pytest.raises(ValueError, match="echo"):
        registry.add(Echo())
    other = registry.copy()

    class Other(Echo):
        name = "other"

    other.add(Other())
    assert registry.names() == ["echo"]
    assert other.names() == ["echo", "other"]
