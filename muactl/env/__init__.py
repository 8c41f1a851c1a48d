"""Runtime: sandboxed databases, tool execution, user simulators.

`Environment` and `ToolResult` load on first use: the process that starts Python tools' children
imports only env/pyhandler.py, and must not load sqlite-utils (pandas, numpy), whose native threads
would make it multi-threaded."""

__all__ = ["Environment", "ToolResult"]


def __getattr__(name: str):
    if name == "Environment":
        from .sandbox import Environment

        return Environment
    if name == "ToolResult":
        from .results import ToolResult

        return ToolResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
