"""The fidelity check's settings and its cases.

- **chats**: seeded open-loop synthetic chats of tenants with long shared system prompts
  (`sim.workloads.open_loop_chats`), in the engine's own KV block size, on `demo` replicas.
- **mooncake**: the first requests of the Mooncake FAST'25 conversation trace that fit a 32k
  context, output capped, a burst's requests (one timestamp) sent 10 ms apart in trace order,
  time-compressed to ~70% of round-robin's throughput with everything queued, on
  `h100-llama3-8b` replicas with a contended cache (16,384 blocks of 16 tokens each).
- **loaded**: the same at 6x the recorded rate (~91%), `loaded_repeats` runs per policy, each
  with its own seeded 0–5 ms of arrival jitter (`jittered`), judged on the means (decision 0023).
- **pd**: the mooncake case on `pd_prefill` P + `pd_decode` D replicas (vLLM), mode `pd_mode`.

Live, each request is a streaming `/v1/completions` call whose prompt is token ids synthesised
from the block ids (`sim.workloads.timed_requests`: equal ids, equal tokens), so the engines,
and the gateway hashing token ids at 4 bytes a token, see exactly the sharing simulated.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from bench import DEFAULT_TRACES, trace_file
from bench.jitter import jittered
from routing.traces import TraceRequest, load_mooncake
from sim.engine.profiles import get_profile
from sim.engine.types import EngineProfile, StepTimeCoefficients
from sim.traces import time_scaled
from sim.workloads import open_loop_chats

MODEL = "kvgate-fidelity"
CASES = ("chats", "mooncake", "loaded", "pd")
MOONCAKE_TRACE = "mooncake_fast25_conversation_trace.jsonl"


@dataclass(frozen=True, slots=True)
class FidelitySettings:
    """Fleet, policies and workloads of one fidelity check (defaults: `make fidelity`)."""

    replicas: int = 4
    profile: str = "demo"
    policies: tuple[str, ...] = ("round-robin", "prefix-aware")
    cases: tuple[str, ...] = CASES
    out_dir: Path = Path("out/fidelity")
    seed: int = 1
    sessions: int = 40
    turns: int = 4
    tenants: int = 8
    rate_per_s: float = 1.5  # sessions started per second
    think_s: float = 4.0  # mean gap between a session's turns
    system_tokens: int = 1500
    user_tokens: int = 100
    output_tokens: int = 24
    # The Mooncake case: the first `mooncake_requests` of the trace (those that fit the
    # context), outputs capped, `mooncake_rate_scale` times faster than recorded for engines
    # at full speed (so arrivals run rate_scale / slowdown times faster), on
    # `mooncake_profile` with this many KV blocks and this context.
    traces: Path = DEFAULT_TRACES
    mooncake_requests: int = 560
    mooncake_rate_scale: float = 4.5  # ~70% of round-robin's throughput (decision 0017)
    mooncake_max_output: int = 16
    mooncake_profile: str = "h100-llama3-8b"
    mooncake_num_blocks: int = 16384
    mooncake_max_model_len: int = 32768
    # Requests with the same timestamp (the trace's bursts) are sent this far apart, in trace
    # order, so the gateway sees them in that order (seconds, as sent).
    burst_gap_s: float = 0.01
    # The loaded case: the Mooncake slice this many times faster than recorded (for engines
    # at full speed), `loaded_repeats` live runs and simulations per policy, each
    # repetition's arrivals shifted by up to `loaded_jitter_s` (seeded by the repetition).
    loaded_rate_scale: float = 6.0  # ~91% of round-robin's throughput (decision 0023)
    loaded_repeats: int = 3
    loaded_jitter_s: float = 0.005
    # The pd case's pool (vLLM's protocol) and when its gateway splits a request.
    pd_prefill: int = 2
    pd_decode: int = 2
    pd_mode: str = "conditional"
    sim_seed: int = 0  # the simulator's scrape phases and random pickers
    # Engines and arrivals this many times slower on both sides: the same utilisation, with
    # a smaller share of TTFT in HTTP overhead and CPU contention.
    slowdown: float = 3.0
    gateway_config: dict[str, object] = field(
        default_factory=lambda: {
            # The gateway's defaults, written out so both sides provably read the same values.
            "health": {"scrape_interval_s": 0.05, "metrics_stale_after_s": 0.2},
            # One log line per request costs gateway CPU that the simulator does not model.
            "server": {"access_log": False},
        }
    )


@dataclass(frozen=True, slots=True)
class Case:
    """One workload on one fleet: the trace, the profile both sides run (already slowed),
    and the emulator's extra arguments that make its engines that profile."""

    name: str
    trace: list[TraceRequest]
    profile_name: str
    profile: EngineProfile
    emulator_args: tuple[str, ...] = ()
    repeats: int = 1  # live runs (and simulations) per policy
    jitter_s: float = 0.0  # each repetition's arrivals shifted by up to this much
    prefill: int = 0  # a P/D pool: prefill and decode replicas instead of the settings' fleet
    decode: int = 0

    def repetition(self, k: int) -> list[TraceRequest]:
        """The trace repetition `k` sends and simulates: `trace`, jittered with seed `k`."""
        return jittered(self.trace, self.jitter_s, k) if self.jitter_s > 0 else self.trace


def build_case(s: FidelitySettings, name: str) -> Case:
    if name == "chats":
        profile = slowed(get_profile(s.profile), s.slowdown)
        return Case(name, build_trace(s, profile.config.block_size), s.profile, profile)
    if name == "mooncake":
        return _mooncake(s)
    if name == "loaded":
        case = _mooncake(replace(s, mooncake_rate_scale=s.loaded_rate_scale))
        return replace(case, name="loaded", repeats=s.loaded_repeats, jitter_s=s.loaded_jitter_s)
    if name == "pd":
        return replace(_mooncake(s), name="pd", prefill=s.pd_prefill, decode=s.pd_decode)
    raise ValueError(f"unknown case {name!r}; known: {', '.join(CASES)}")


def build_trace(s: FidelitySettings, block_tokens: int) -> list[TraceRequest]:
    trace = open_loop_chats(
        seed=s.seed,
        sessions=s.sessions,
        turns=s.turns,
        tenants=s.tenants,
        rate_per_s=s.rate_per_s,
        think_s=s.think_s,
        system_tokens=s.system_tokens,
        user_tokens=s.user_tokens,
        output_tokens=s.output_tokens,
        block_tokens=block_tokens,
        model=MODEL,
    )
    return trace if s.slowdown == 1 else time_scaled(trace, 1 / s.slowdown)


def _mooncake(s: FidelitySettings) -> Case:
    base = get_profile(s.mooncake_profile)
    config = replace(
        base.config, num_blocks=s.mooncake_num_blocks, max_model_len=s.mooncake_max_model_len
    )
    cap = s.mooncake_max_output
    trace = [
        replace(r, output_tokens=min(r.output_tokens, cap), model=MODEL)
        for r in load_mooncake(trace_file(s.traces, MOONCAKE_TRACE), limit=s.mooncake_requests)
        if r.input_tokens + cap <= config.max_model_len
    ]
    args: tuple[str, ...] = ("--num-gpu-blocks", str(config.num_blocks))
    args += ("--max-model-len", str(config.max_model_len))
    profile = slowed(replace(base, config=config), s.slowdown)
    return Case(
        "mooncake",
        spread_bursts(time_scaled(trace, s.mooncake_rate_scale / s.slowdown), s.burst_gap_s),
        s.mooncake_profile,
        profile,
        args,
    )


def spread_bursts(trace: list[TraceRequest], gap_s: float) -> list[TraceRequest]:
    """Each request that shares its arrival with the one before it, `gap_s` after it.

    Sent at once, a burst reaches the gateway in an order of the client's connections (and
    round-robin's placement, near load, with it); spread, in the trace's."""
    out: list[TraceRequest] = []
    for r in trace:
        late = out and r.arrival_s <= out[-1].arrival_s
        out.append(replace(r, arrival_s=out[-1].arrival_s + gap_s) if late else r)
    return out


def slowed(profile: EngineProfile, factor: float) -> EngineProfile:
    """`profile` with every step `factor` times longer: what `kvgate emulate --speedup
    1/factor` serves (step time is linear in its coefficients)."""
    if factor == 1:
        return profile
    t = profile.timing
    timing = StepTimeCoefficients(*(getattr(t, f.name) * factor for f in fields(t)))
    return replace(profile, timing=timing)
