"""muactl: train tool-using LLM agents with RL against simulated users.

The packages and the order in which they may import each other: ARCHITECTURE.md at the top of the repository."""

__version__ = "0.1.0"
