"""Runtime: sandboxed databases, tool execution, user simulators."""

from .results import ToolResult
from .sandbox import Environment

__all__ = ["Environment", "ToolResult"]
