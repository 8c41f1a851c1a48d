"""Runs on disk: the run store (store) and the HTML report (report)."""
