"""The data-parallel bench's shape in the offline simulator (`python -m bench dp --sim`).

The same fleet (engines of `--ranks` ranks, `demo` profile with `--blocks` per rank) and chats
of the same sizes (`--tenants` tenants, `--system-tokens`-token system prompts, 4 turns),
replayed with kvgate's policy twice: the gateway routing to ranks, and the engines balancing
them (`kvgate sim --data-parallel-size N --dp-routing rank|engine`). The simulator's users
run a closed loop (`--clients`, each sends its next turn when answered) where the live bench
starts chats at `--rate`: the shape compares, not the absolute times.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from sim.engine.profiles import get_profile
from sim.replay import ClosedLoop, Replay, SimSettings
from sim.workloads import family


def simulate(args: argparse.Namespace) -> dict[str, list[dict[str, object]]]:
    """One replay per repeat (seed) and rank routing; each run's hit rate and mean TTFT."""
    profile = get_profile("demo")
    profile = replace(profile, config=replace(profile.config, num_blocks=args.blocks))
    runs: dict[str, list[dict[str, object]]] = {}
    for repeat in range(args.repeats):
        cell = family.FamilyCell(
            tenants=args.tenants, prefix_tokens=args.system_tokens, popularity="uniform",
            conversations=args.conversations, min_turns=4, max_turns=4, seed=args.seed + repeat,
        )  # fmt: skip
        trace, turns = family.closed_loop_trace(family.chats(cell), profile.config.block_size)
        for name, dp_routing in (("kvgate ranks", "rank"), ("kvgate no ranks", "engine")):
            settings = SimSettings(
                replicas=args.replicas, data_parallel_size=args.ranks, dp_routing=dp_routing,
                seed=args.seed + repeat,
            )  # fmt: skip
            loop = ClosedLoop(args.clients, turns)
            result = Replay(trace, args.policy, profile, settings, loop=loop).run()
            queries = result.prefix_queries
            runs.setdefault(name, []).append(
                {
                    "hit_rate": result.prefix_hits / queries if queries else 0.0,
                    "ttft_mean_s": statistics.fmean(result.log.ttft_s),
                    "requests": result.requests,
                }
            )
    return runs
