"""The gateway: ASGI app, proxy, admin API, metrics and the EPP server (the command line that
starts it is `kvgate.cli`)."""
