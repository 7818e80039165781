"""`python -m bench SUBCOMMAND [ARGS]`: kvgate's benchmarks, calibration and fidelity check.

Run from the repository's root (`bench` is not installed). Subcommands (modules in
`SUBCOMMANDS`, each with its `--help`):
- routing and admission: quality (against peer routers), regime (a grid of regimes), dp
  (data-parallel ranks), pd (prefill/decode pools against peers' P/D modes), vllm-pressure
  (real vLLM CPU), epp and epp-flow (behind Envoy; its flow control and rewrites), admission,
  precise, tune (the self-tuning loop on a regime-switching workload);
- cost: overhead (latency and CPU a router adds), decision (one routing decision),
  tracing-overhead, tokenize (tokenizer-exact prompt ids), kv-events, body-parse (loop stall);
- the simulator: calibrate (fit the engine model to vLLM), fidelity (live against simulated),
  sim-speed, sweep-runners;
- several gateways: shared-state, shared-state-fleet; and dashboard (Grafana panels rendered);
- all: quality, overhead and decision in turn; takes only `--quick`, passed to those with it.
Arguments after the subcommand go to it: `python -m bench quality --help`.
"""

from __future__ import annotations

import importlib
import sys

# Subcommand → the module whose `main(argv)` runs it (imported lazily: each pulls in its own
# heavy dependencies).
SUBCOMMANDS = {
    "quality": "bench.quality.__main__",
    "overhead": "bench.overhead.__main__",
    "decision": "bench.decision",
    "dashboard": "bench.dashboard.__main__",
    "calibrate": "bench.calibrate.__main__",
    "fidelity": "bench.fidelity.__main__",
    "regime": "bench.regime.__main__",
    "vllm-pressure": "bench.vllm_pressure.__main__",
    "epp": "bench.epp.__main__",
    "epp-flow": "bench.epp.flow_control",
    "admission": "bench.admission.__main__",
    "kv-events": "bench.kv_events",
    "precise": "bench.precise.__main__",
    "tokenize": "bench.tokenize.__main__",
    "shared-state": "bench.shared_state",
    "shared-state-fleet": "bench.shared_state_fleet",
    "sweep-runners": "bench.sweep_runners",
    "sim-speed": "bench.sim_speed",
    "tracing-overhead": "bench.overhead.tracing",
    "body-parse": "bench.body_parse",
    "dp": "bench.data_parallel.__main__",
    "pd": "bench.pd.__main__",
    "tune": "bench.tune.__main__",
}
ALL = ("quality", "overhead", "decision")
# Subcommands that take `--quick` (the decision microbenchmark is quick already).
QUICK = ("quality", "overhead")


def _dispatch(name: str, argv: list[str]) -> int:
    module = importlib.import_module(SUBCOMMANDS[name])
    rc: int | None = module.main(argv)
    return rc or 0


def _shared(name: str, argv: list[str]) -> list[str]:
    """The arguments `all` hands to subcommand `name` (each keeps its own default `--out`)."""
    return ["--quick"] if "--quick" in argv and name in QUICK else []


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in (*SUBCOMMANDS, "all"):
        asked = bool(args) and args[0] in ("-h", "--help")
        print(__doc__, file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    name, rest = args[0], args[1:]
    if name != "all":
        return _dispatch(name, rest)
    failures = 0
    for sub in ALL:
        print(f"== bench {sub} ==", file=sys.stderr, flush=True)
        failures += _dispatch(sub, _shared(sub, rest)) != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
