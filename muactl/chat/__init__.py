"""`muactl chat`: a Textual app where a person plays the user against a checkpoint (see app.py).

Importing this package imports Textual; the CLI imports it only inside the chat command."""

from .app import ChatApp, run_chat
from .session import (
    ChatConfig,
    ChatStore,
    GuardedAgent,
    HumanUser,
    Seat,
    db_diff,
    free_task,
)

__all__ = ["ChatApp", "ChatConfig", "ChatStore", "GuardedAgent", "HumanUser", "Seat", "db_diff", "free_task", "run_chat"]
