"""`kvgate tune`: the self-tuning loop beside a running gateway (`sim.tune.live`); it reads
the gateway's recording and admin API, and never sits on the request path."""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from routing.config.schema import ConfigError

if TYPE_CHECKING:
    from kvgate.cli.options import SubParsers


def add_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "tune",
        help="replay the gateway's recent traffic and propose or switch its routing profile",
        description="Every tuning.interval_s, replay the last tuning.window_s of the gateway's "
        "recording (server.record_path) in the simulator under the live profile and "
        "candidates, and report a proposal to the gateway's /admin/tuning (mode shadow) or "
        "switch its profile (mode apply). The admin key, if any, comes from KVGATE_ADMIN_KEY.",
    )
    p.add_argument(
        "--gateway",
        required=True,
        action="append",
        metavar="URL",
        help="a gateway's admin URL; repeat for every gateway of the pool (the first is read, "
        "each gets the proposals and switches)",
    )
    p.add_argument("--config", required=True, metavar="FILE", help="the gateway's config file")
    p.add_argument("--record", metavar="FILE", help="the recording (default server.record_path)")
    p.add_argument(
        "--redis",
        metavar="URL",
        help="one tuner per pool: evaluate only while holding a lease in this Redis server",
    )
    p.add_argument(
        "--engine-timing",
        choices=("named", "fitted"),
        help="the replays' engine timing: tuning.engine_profile as is, or fitted to the "
        "observed TTFTs (default tuning.engine_timing)",
    )
    p.add_argument("--once", action="store_true", help="one evaluation now, then exit")
    p.add_argument("--log-level", default="info", help="default %(default)s")


def run(args: argparse.Namespace) -> int:
    from routing.config.schema import load_config
    from routing.config.tuning import tuner_lease_key
    from sim.replay.settings import SimSettings
    from sim.replay.settings import load_config as sim_config
    from sim.replay.sweep.command import open_runner
    from sim.tune.lease import Lease
    from sim.tune.live import GatewayAdmin, LiveTuner

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per admin call otherwise
    config = load_config(args.config)
    record = args.record or config.server.record_path
    if record is None:
        raise ConfigError("tune: no recording: give --record or set server.record_path")
    if config.tuning.mode == "off":
        raise ConfigError("tune: tuning.mode is off in the config (shadow or apply)")
    key = os.environ.get("KVGATE_ADMIN_KEY")
    admin, *others = [GatewayAdmin(url, key) for url in args.gateway]
    lease = None
    if args.redis:
        name = tuner_lease_key(config.state.namespace, config.discovery.pool)
        lease = Lease(args.redis, name, ttl_s=3 * config.tuning.interval_s)
    try:
        with open_runner(1, config.tuning.ray_address) as runner:
            settings = SimSettings(**sim_config(args.config))
            tuner = LiveTuner(config, admin, Path(record), settings, runner, others, lease)
            tuner.timing = args.engine_timing
            while True:
                if not args.once:
                    time.sleep(config.tuning.interval_s)
                tuner.tick()
                if args.once:
                    return 0
    except KeyboardInterrupt:
        return 0
    finally:
        for gateway in (admin, *others):
            gateway.close()
        if lease is not None:
            lease.release()
