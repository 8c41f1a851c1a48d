"""Sharing domains and policies: packs, the domain catalog, MCP and OpenEnv servers, the verl export."""
