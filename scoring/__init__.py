"""Routing plugins: filters, scorers and pickers, one per module, plus the profile config.

Nothing registers at import time: the composition root calls
`scoring.builtin.register_builtins(registry)` and then `routing.config.profiles.build_scheduler`.
"""
