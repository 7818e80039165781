"""The fidelity check (`make fidelity`): does the simulator predict the live system?

Each case's trace (`workload`: synthetic chats, a Mooncake slice at ~70% of round-robin's
throughput, the same slice at ~91%) runs twice per policy: live, through `kvgate serve` in
front of `kvgate emulate` replicas (child processes; TTFT measured by the client, hit rate
from the replicas' own counters), and simulated,
through `sim.replay` with the same engine profile, replica count, policy and gateway config
file, plus the time outside the engines that a probe of the idle fleet measured first
(`probe`). The file the gateway recorded during the live run is simulated too (the record →
simulate round trip). Reported per case and policy: mean and p90 TTFT and hit rate of each
run, the relative errors of the simulations (each over 10% named), and what explains them:
the engines' own mean TTFT and ITL against the model's, the time outside the engines seen
and modelled, and the jitter of arrivals. The near-saturation case runs several times per
policy, each time with its own seeded arrival jitter on both sides, and is judged on the
means over its runs of each run's mean and p90 TTFT.

By default both sides run the profile 3× slower, arrivals too, so the load is the same
(`--slowdown`): at full speed on a busy 2-core machine the emulated steps took 2.2–2.7× as
long as modelled, and the check would measure the machine's CPU rather than the simulator.

- `workload`: settings and the cases' traces (sent as `sim.workloads.timed_requests`)
- `probe`: the time outside the engines, measured on an idle fleet
- `live`: the live run, one `sim.live` experiment per policy
- `check`: the two simulations of one policy and what they are compared on
- `compare`: the error arithmetic (pure)
- `report`: table, `fidelity.json`, `fidelity_ttft_cdf.png`
"""
