"""The gateway: ASGI app, proxy, admin API and CLI — the composition root of kvgate."""
