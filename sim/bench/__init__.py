"""Benchmarks: routing against peer routers, gateway overhead, one routing decision."""
