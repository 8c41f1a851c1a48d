raise SystemExit("never run: muactl only parses this file")
from tau2.environment.toolkit import ToolType, is_discoverable_tool, is_tool  # noqa: E402 (τ²'s, never imported)


class KnowledgeTools:
    @is_tool(ToolType.READ)
    def get_user_information_by_id(self, user_id: str) -> str:
        """Look up an invented user.

        Args:
            user_id: The user's id
        """

    @is_discoverable_tool(ToolType.WRITE)
    def open_bank_account_4821(self, user_id: str, account_type: str, account_class: str) -> str:
        """Open an invented account.

        Args:
            user_id (string): Whose account
            account_type (string): checking or savings
            account_class (string): The class's full name

        Returns:
            Opened.
        """


class KnowledgeUserTools:
    @is_discoverable_tool(ToolType.WRITE)
    def get_referral_link(self, user_id: str, card_name: str) -> str:
        """Make an invented referral link.

        Args:
            user_id (string): The referrer
            card_name (string): The card referred
        """
