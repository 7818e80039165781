"""`python -m bench SUBCOMMAND [ARGS]`: kvgate's benchmarks, calibration and fidelity check.

Run from the repository's root (`bench` is not installed). Subcommands:

  quality    the same workloads through kvgate and peer routers, each in front of a fresh
             emulated fleet: TTFT, hit rate, load share (`bench.quality`; `make bench-routing`
             is its kvgate-only router list)
  overhead   the latency and CPU each router adds under open-loop load (`bench.overhead`)
  decision   one routing decision, timed (`bench.decision`)
  calibrate  measure real vLLM (CPU) and fit the engine model (`bench.calibrate`)
  fidelity   live against simulated, same trace and policies (`bench.fidelity`)
  regime     kvgate's default against sglang-router, vllm-router and kvgate's other
             policies over a grid of cache pressure × popularity × load, live and
             simulated; ratio heat maps (`bench.regime`; `make bench-regime`)
  vllm-pressure  routers in front of two real vLLM CPU servers with a small KV cache,
             multi-tenant chats under cache pressure (`bench.vllm_pressure`;
             `make bench-vllm`)
  epp        Envoy + kvgate epp against Envoy round-robin and kvgate as the front door:
             hit rate, TTFT, and the latency the picker's hop adds at 200 req/s
             (`bench.epp`; `make bench-epp`)
  admission  a burst of 10x capacity from tenants of unequal demand on an emulated fleet:
             shed fraction, admitted TTFT against unloaded, shares against fair shares
             (`bench.admission`; `make bench-admission`)
  kv-events  KV-event decoding and precise-index throughput, events/s on one core, and
             the index's memory per block (`bench.kv_events`)
  precise    the precise (KV-event-fed) index against the emulator: exact predictions of
             cached tokens, and precise-prefix against the default on pressure cells
             (`bench.precise`; `make bench-precise`)
  tokenize   what tokenizer-exact prompt ids cost per request: local tokenizer.json +
             chat template, and an engine's /tokenize with the gateway's cache
             (`bench.tokenize`)
  shared-state  how stale one gateway's view of another's state is (through a real
             redis-server or between workers), and Redis memory per tracked block
             (`bench.shared_state`)
  shared-state-fleet  N gateways (or workers) sharing nothing, sharing through Redis, one
             gateway, and a Redis outage mid-run, on multi-tenant chats: hit rate and
             TTFT (`bench.shared_state_fleet`)
  dashboard  the Grafana dashboard's panels rendered from a live run's metrics (emulated
             replicas, `kvgate serve`, chats with a surge): a PNG laid out like the
             dashboard and the series as JSON (`bench.dashboard`)
  sweep-runners  one `kvgate sim sweep` grid of 32 runs with --jobs 1, --jobs 2 and --ray:
             wall times, and the same results from each (`bench.sweep_runners`)
  sim-speed  CPU seconds of one `kvgate sim` replay of the Mooncake trace per policy, the
             compiled KV cache against the pure-Python reference (`bench.sim_speed`)
  tracing-overhead  kvgate's CPU per request with OTLP tracing on against off, side by
             side at 500 req/s over the overhead bench's stubs (`bench.overhead.tracing`)
  all        quality, overhead and decision in turn; takes only `--quick`, passed on to the
             subcommands that have it

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
    "admission": "bench.admission.__main__",
    "kv-events": "bench.kv_events",
    "precise": "bench.precise.__main__",
    "tokenize": "bench.tokenize.__main__",
    "shared-state": "bench.shared_state",
    "shared-state-fleet": "bench.shared_state_fleet",
    "sweep-runners": "bench.sweep_runners",
    "sim-speed": "bench.sim_speed",
    "tracing-overhead": "bench.overhead.tracing",
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
