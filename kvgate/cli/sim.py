"""`kvgate sim`, `kvgate sim sweep` and `kvgate sim tune`: the simulator's own options and
runners (`sim.replay.arguments`, `sim.replay.cli`, `sim.replay.sweep`, `sim.tune.offline`);
exit status 3 when a sweep lost a run on a Ray cluster."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from routing.config.schema import ConfigError
from sim.replay.arguments import add_sim_parser

if TYPE_CHECKING:
    from kvgate.cli.options import SubParsers


def add_parser(sub: SubParsers) -> None:
    add_sim_parser(sub)


def run(args: argparse.Namespace) -> int:
    from sim.replay.cli import run_sim
    from sim.replay.sweep.runners import SweepRunError

    try:
        if args.sim_mode == "sweep":
            from sim.replay.sweep import run_sweep

            return run_sweep(args)
        if args.sim_mode == "tune":
            from sim.tune.offline import run_tune

            return run_tune(args)
        if args.trace is None:
            raise ValueError("sim: --trace is required (or: kvgate sim sweep --trace ...)")
        return run_sim(args)
    except (ValueError, OSError) as exc:
        raise ConfigError(str(exc)) from None
    except SweepRunError as exc:  # a run lost on a Ray cluster, after its retries
        print(f"kvgate: {exc}", file=sys.stderr)
        return 3
