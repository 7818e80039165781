"""Simulation, and live runs against emulated engines.

- `engine`: the engine model (pure; imports no web library)
- `emulator`: the engine model behind vLLM's HTTP surface (`kvgate emulate`)
- `replay`, `traces`: the offline discrete-event replayer (`kvgate sim`, `kvgate sim sweep`)
  and the traces it reads
- `workloads`: synthetic chats, closed loop and open loop
- `live`: live experiments (fleet → router → workload → counters), used by `kvgate demo`
  (`demo`) and the benchmarks in the repository's `bench/`
- `percentile`: the one percentile rule; `plots`: matplotlib, optional (`kvgate[plots]`)

Nothing here imports `gateway`: the gateway runs as a child process when a live run needs it.
"""
