"""Exports of a domain to other training stacks (verl)."""
