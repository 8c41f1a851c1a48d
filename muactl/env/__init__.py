"""Runtime: sandboxed databases, tool execution, user simulators."""

from .sandbox import Environment, ToolResult

__all__ = ["Environment", "ToolResult"]
