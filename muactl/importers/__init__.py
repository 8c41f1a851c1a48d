"""Importers: turn other benchmarks' data into muactl domains and task sets (`muactl import`)."""
