"""Tools for the assistant runtime: the registry hosts fill, and the built-in tools."""

from a2a_gateway.agent.tools.base import Tool, ToolContext, ToolError, ToolRegistry, ToolResult

__all__ = ["Tool", "ToolContext", "ToolError", "ToolRegistry", "ToolResult"]
