"""Pickers: rank the scored candidates (one plugin per module)."""
