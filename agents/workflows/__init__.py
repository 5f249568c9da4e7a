"""Workflows: deterministic YAML procedures the router starts when their intent matches."""
