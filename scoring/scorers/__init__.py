"""Scorers: each candidate a score in [0, 1] (one plugin per module)."""
