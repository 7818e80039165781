"""Live experiments: emulated replicas and routers as child processes, real HTTP traffic.

- `experiment`: `run_experiment`, fleet (emulated, or the caller's own) → router →
  workload → the replicas' counters → a typed `ExperimentResult` (used by `kvgate demo`
  and every benchmark loop in `bench/`)
- `processes`: `ChildProcess`, the one child-process wrapper; `free_port`; `kvgate
  emulate` and `kvgate serve` as children
- `client`: send closed-loop chats or open-loop timed requests, time every answer
- `scrape`: the replicas' vLLM counters

Nothing here imports the gateway: kvgate runs as a child process (`python -m kvgate.cli`).
"""
