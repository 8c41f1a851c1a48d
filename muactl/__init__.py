"""muactl: train tool-using LLM agents with RL against simulated users."""

__version__ = "0.1.0"
