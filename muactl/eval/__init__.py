"""Evaluation: run episodes over a task set and store them (evaluate), after checking the backends (preflight)."""
