"""Envoy + kvgate EPP vs Envoy round-robin vs kvgate as the front door, in one run.

`python -m bench epp [--quick] [--envoy-config envoy-original-dst.yaml] [--out out/bench/epp]`
(`make bench-epp`); Envoy is rendered from that template of `deploy/envoy/`. Part 1 sends the
same multi-tenant chats (closed loop, the quality bench's synthetic workload) through each
front end on a fresh emulated fleet and reports the replicas' prefix-cache hit rate and
client TTFT. Part 2 offers a fixed rate (200 req/s) of small requests to fast stub replicas
directly and through each front end, in rounds, and reports the latency each adds over
direct. Writes `epp.json` and `epp.png` to `--out` and prints both tables.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.epp.hop import ENVOY_EPP, ENVOY_RR, run_hop
from bench.epp.quality import run_quality
from bench.epp.report import epp_hop, summarise_hop, write_outputs


@dataclass(frozen=True, slots=True)
class Settings:
    """What one run does (all from the command line)."""

    conversations: int
    chat_rate: float
    replicas: int
    seed: int
    policy: str
    body_mode: str
    envoy_config: str
    hop_rate: float
    rounds: int
    duration_s: float
    warmup_s: float
    out: Path


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(prog="python -m bench epp", description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=48, help="chats (default 48)")
    p.add_argument("--chat-rate", type=float, default=3.0, help="chats started/s (default 3)")
    p.add_argument("--replicas", type=int, default=4, help="emulated replicas (default 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", default="prefix-aware", help="EPP's and front door's policy")
    p.add_argument(
        "--body-mode",
        choices=("BUFFERED", "FULL_DUPLEX_STREAMED"),
        default="BUFFERED",
        help="Envoy's request body mode towards the EPP (default BUFFERED, as deployed)",
    )
    p.add_argument(
        "--envoy-config",
        choices=("envoy.yaml", "envoy-original-dst.yaml"),
        default="envoy.yaml",
        help="deploy/envoy/ template: override_host pool (default) or the ORIGINAL_DST cluster",
    )
    p.add_argument("--hop-rate", type=float, default=200.0, help="req/s of part 2 (200)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of part 2 (default 3)")
    p.add_argument("--duration", type=float, default=6.0, help="s per target per round (6)")
    p.add_argument("--warmup", type=float, default=2.0, help="unrecorded s per target (2)")
    p.add_argument("--quick", action="store_true", help="16 chats, 1 round of 3 s")
    p.add_argument("--out", default="out/bench/epp", help="output directory")
    a = p.parse_args(argv)
    conversations, rounds, duration = a.conversations, a.rounds, a.duration
    if a.quick:
        conversations, rounds, duration = 16, 1, 3.0
    return Settings(
        conversations=conversations,
        chat_rate=a.chat_rate,
        replicas=a.replicas,
        seed=a.seed,
        policy=a.policy,
        body_mode=a.body_mode,
        envoy_config=a.envoy_config,
        hop_rate=a.hop_rate,
        rounds=rounds,
        duration_s=duration,
        warmup_s=a.warmup,
        out=Path(a.out),
    )


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    logs = settings.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"epp bench: {os.cpu_count()} cores shared, logs in {logs}", file=sys.stderr)
    quality = asyncio.run(
        run_quality(
            conversations=settings.conversations,
            rate=settings.chat_rate,
            seed=settings.seed,
            replicas=settings.replicas,
            policy=settings.policy,
            body_mode=settings.body_mode,
            log_dir=logs,
            template=settings.envoy_config,
        )
    )
    print(f"[hop] {settings.hop_rate:g} req/s, {settings.rounds} rounds", file=sys.stderr)
    rounds = run_hop(
        rate=settings.hop_rate,
        rounds=settings.rounds,
        duration_s=settings.duration_s,
        warmup_s=settings.warmup_s,
        policy=settings.policy,
        body_mode=settings.body_mode,
        logs=logs,
        template=settings.envoy_config,
    )
    report = {
        "started_utc": when,
        "wall_s": time.monotonic() - started,
        "cores": os.cpu_count(),
        "settings": {**asdict(settings), "out": str(settings.out)},
        "quality": [{"router": r.label.removeprefix("epp-"), **r.figures()} for r in quality],
        "hop": {
            "rate": settings.hop_rate,
            "rounds": rounds,
            "summary": summarise_hop(rounds),
            "epp_hop": epp_hop(rounds, ENVOY_EPP, ENVOY_RR),
        },
    }
    ttfts = {r.label.removeprefix("epp-"): r.ttfts_s for r in quality}
    write_outputs(report, ttfts, settings.out)
    print(f"wall time {report['wall_s']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
