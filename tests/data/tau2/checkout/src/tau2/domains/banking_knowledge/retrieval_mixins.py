raise SystemExit("never run: muactl only parses this file")
from tau2.environment.toolkit import ToolType, is_tool  # noqa: E402 (τ²'s, never imported)


class KBSearchMixin:
    @is_tool(ToolType.READ)
    def KB_search(self, query: str) -> str:
        """Search the invented documents.

        Args:
            query: What to look for
        """
