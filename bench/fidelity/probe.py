"""The probe that calibrates the simulator's terms for time outside the engines.

Before the live runs, requests go one at a time to an idle fleet of the `mooncake` case, three
times: small prompts straight to one replica, small and long prompts through the gateway. With
o = a run's client mean TTFT − the engines' own mean (their TTFT histogram, same requests):

    engine_overhead_s        = o(small, straight)      (`FrontEnd.request_overhead_s`)
    gateway_overhead_s       = o(small, gateway) − engine_overhead_s
                               (`SimSettings.gateway_overhead_s`: its own time, second hop)
    gateway_overhead_token_s = (o(long, gateway) − o(small, gateway)) / (long − small
                               tokens): bodies parsed, hashed and sent on, per prompt token

No figure of the runs the check compares goes into them. The emulator's serial work per
request (`FrontEnd.frontend_s`) is not probed, an idle probe cannot tell it from a fixed
overhead: it stays 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from routing.traces import TraceRequest
from sim.live.experiment import (
    Fleet,
    Router,
    RouterFactory,
    RouterSite,
    kvgate_router,
    open_loop,
    run_experiment,
)
from sim.workloads import TimedRequest, timed_requests

PROBE_REQUESTS = 16  # of each size
SMALL_TOKENS = 64
LONG_TOKENS = 8192
PROBE_OUTPUT = 4
# Longer than a request's whole life on a 3x slowed `h100-llama3-8b` engine.
GAP_S = {SMALL_TOKENS: 0.25, LONG_TOKENS: 0.8}


@dataclass(frozen=True, slots=True)
class Overheads:
    """What the probe measured (seconds; see the module docstring)."""

    engine_overhead_s: float
    gateway_overhead_s: float
    gateway_overhead_token_s: float
    # (client mean TTFT, engines' mean TTFT) of each probe run
    small_direct: tuple[float, float]
    small_gateway: tuple[float, float]
    long_gateway: tuple[float, float]
    requests: int  # per run

    @classmethod
    def of(
        cls,
        small_direct: tuple[float, float],
        small_gateway: tuple[float, float],
        long_gateway: tuple[float, float],
        requests: int = 0,
    ) -> Overheads:
        """The terms from the three runs' (client mean, engines' mean); none below 0."""
        engine = max(0.0, small_direct[0] - small_direct[1])
        small = small_gateway[0] - small_gateway[1]
        long = long_gateway[0] - long_gateway[1]
        return cls(
            engine_overhead_s=engine,
            gateway_overhead_s=max(0.0, small - engine),
            gateway_overhead_token_s=max(0.0, (long - small) / (LONG_TOKENS - SMALL_TOKENS)),
            small_direct=small_direct,
            small_gateway=small_gateway,
            long_gateway=long_gateway,
            requests=requests,
        )


def probe_requests(model: str, tokens: int, block_tokens: int) -> list[TraceRequest]:
    """`tokens`-token prompts of their own (no prefix shared), one every GAP_S[tokens]."""
    blocks = -(-tokens // block_tokens)
    return [
        TraceRequest(
            i * GAP_S[tokens],
            tokens,
            PROBE_OUTPUT,
            tuple(range(i * blocks, (i + 1) * blocks)),
            block_tokens,
            model,
        )
        for i in range(PROBE_REQUESTS)
    ]


def _direct(site: RouterSite) -> contextlib.AbstractContextManager[Router]:
    """No router: the first replica itself."""

    @contextlib.contextmanager
    def start() -> Iterator[Router]:
        yield Router(site.replica_urls[0])

    return start()


async def probe_overheads(
    fleet: Fleet, config_path: Path, settle_s: float, out_dir: Path, block_tokens: int
) -> Overheads:
    gateway = kvgate_router("round-robin", ("--config", str(config_path)), settle_s=settle_s)
    runs = []
    for label, router, tokens in (
        ("probe-small-direct", _direct, SMALL_TOKENS),
        ("probe-small-gateway", gateway, SMALL_TOKENS),
        ("probe-long-gateway", gateway, LONG_TOKENS),
    ):
        requests = timed_requests(probe_requests(fleet.model, tokens, block_tokens), fleet.model)
        runs.append(await _run(fleet, router, requests, label, out_dir))
    small_direct, small_gateway, long_gateway = runs
    return Overheads.of(small_direct, small_gateway, long_gateway, PROBE_REQUESTS)


async def _run(
    fleet: Fleet, router: RouterFactory, requests: list[TimedRequest], label: str, out_dir: Path
) -> tuple[float, float]:
    """(client mean TTFT, engines' mean TTFT) of one probe run."""
    result = await run_experiment(
        fleet, router, open_loop(label, requests), label=label, log_dir=out_dir / "logs"
    )
    if result.errors:
        raise RuntimeError(f"{label}: {len(result.errors)} errors, e.g. {result.errors[0]}")
    return result.ttft_mean_s, result.engine_ttft_mean_s
