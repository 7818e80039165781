"""The latency and CPU each router adds under open-loop load (`python -m bench overhead`).

- `__main__`: the command line and the sweep of rates per target
- `engine`: the near-zero-cost stub replicas (`python -m bench.overhead.engine`)
- `fleet`: those replicas started as one child process (`start_stub_fleet`)
- `wrk`, `wrk_open_loop.lua`: wrk run open-loop at a fixed rate
- `usage`: CPU time and peak memory of a process tree, from /proc
- `report`: latency added over direct, saturation, table, JSON, plots
- `tracing`: what OTLP tracing costs kvgate (`python -m bench tracing-overhead`)
"""
