"""Seeded generators of the built-in domains' data: `python -m muactl.seeds DOMAIN [--scale N] [-o DIR]`.

The committed files under domains/<name>/data/ are this script's output at scale 1 and seed 0;
benchmarks use larger scales. Each domain's generator lives in its own module with a
`generate(scale: int, seed: int) -> dict[table, list[row]]` function.
"""
