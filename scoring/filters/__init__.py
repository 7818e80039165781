"""Filters: drop candidates before scoring (one plugin per module)."""
