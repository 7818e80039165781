"""The config file: its schema, loader and built-in routing profiles, shared by the gateway
and the simulator (`kvgate check-config` prints the effective one)."""
