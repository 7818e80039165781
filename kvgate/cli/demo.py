"""`kvgate demo`: emulated replicas and the gateway, a chat workload replayed once per
policy; exit status 1 if any request failed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvgate.cli.options import SubParsers


def add_parser(sub: SubParsers) -> None:
    d = sub.add_parser(
        "demo",
        help="start emulated replicas and the gateway, replay a chat workload per policy",
        description="Runs the built-in multi-tenant, multi-turn chat workload through the "
        "gateway in front of a fresh set of emulated replicas (engine profile demo), once per "
        "policy, and reports prefix-cache hit rates (from the replicas' metrics), requests per "
        "replica and TTFT; writes summary.json and, with kvgate[plots], ttft_cdf.png to "
        "--out. Exits 1 if any request failed.",
    )
    d.add_argument("--replicas", type=int, default=4, help="emulated replicas (default 4)")
    d.add_argument(
        "--policies",
        default=None,
        help="comma-separated policies to compare (default: round-robin,session,prefix-aware)",
    )
    d.add_argument("--conversations", type=int, default=40, help="chats to replay (default 40)")
    d.add_argument("--out", default="out/demo", help="output directory (default out/demo)")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from sim.demo import DEMO_POLICIES, DemoSettings, run_demo

    policies = tuple(p for p in (args.policies or "").split(",") if p) or DEMO_POLICIES
    settings = DemoSettings(
        replicas=args.replicas,
        policies=policies,
        conversations=args.conversations,
        out_dir=Path(args.out),
    )
    summaries = asyncio.run(run_demo(settings))
    return 1 if any(s["errors"] for s in summaries) else 0
