"""Invented tool docstrings in τ²'s layout: muactl reads them with ast and never runs this file."""

raise SystemExit("muactl must never run a τ² tools.py")


class RetailTools:
    def find_user_id_by_email(self, email: str) -> str:
        """Find the id of a user from their email address.

        Args:
            email: The user's email address.

        Returns:
            str: The user id.
        """
