"""The fidelity check (`make fidelity`): does the simulator predict the live system?

Each case's trace (`workload`) runs per policy live, through `kvgate serve` in front of
`kvgate emulate` replicas (TTFT measured by the client, hit rate by the replicas' counters),
and simulated through `sim.replay` with the same profile, replica count, policy and config
file, plus the time outside the engines that `probe` measured on the idle fleet; the file the
gateway recorded live is simulated too. Reported per case and policy: mean and p90 TTFT and
hit rate, the simulations' relative errors (each over 10% named) and what explains them. The
near-saturation case runs several times per policy, each with its own seeded arrival jitter
on both sides, judged on the means (docs/decisions/0023-fidelity-near-saturation.md). Both
sides run 3× slower by default (`--slowdown`), so as not to measure the machine's CPU.

- `workload`: settings and cases; `probe`: the time outside the engines, on an idle fleet;
- `live`: one `sim.live` experiment per policy; `check`: a policy's two simulations;
- `compare`: the error arithmetic (pure); `report`: table, `fidelity.json`, the TTFT CDF.
"""
