"""`kvgate tune`: the self-tuning loop beside a running gateway (`sim.tune.live`); it reads
the gateway's recording and admin API, and never sits on the request path."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from routing.config.schema import ConfigError

if TYPE_CHECKING:
    from gateway.tuner_child import TunerChild
    from kvgate.cli.options import SubParsers
    from routing.config.schema import GatewayConfig

log = logging.getLogger("kvgate")


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
    p.add_argument(
        "--parent",
        type=int,
        metavar="PID",
        help="exit once process PID (the gateway that started this tuner) is gone",
    )
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
    # SIGTERM (the gateway stopping its child) ends the loop as Ctrl-C does: the lease is
    # released on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.parent is not None:
        _exit_with(args.parent)
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


def beside_gateway(args: argparse.Namespace, cfg: GatewayConfig) -> TunerChild | None:
    """What `kvgate serve` starts beside itself with `tuning.spawn` (gateway.tuner_child):
    the tuner on the same config file and recording; None (said in a warning) when it
    could not work."""
    from gateway.auth import ADMIN_KEY_ENV
    from gateway.tuner_child import TunerChild

    tuning, server = cfg.tuning, cfg.server
    if tuning.mode == "off" or not tuning.spawn:
        return None
    why = None
    if args.config is None:
        why = "no config file to give it"
    elif server.record_path is None:
        why = "no recording to replay (set server.record_path or --record)"
    elif getattr(args, "workers", 1) > 1:
        why = "--workers > 1 does not record"
    elif server.tls_cert_file and server.admin_port is None:
        why = "the admin API is on the TLS port only (set server.admin_port)"
    elif cfg.security.admin_key_sha256 and not os.environ.get(ADMIN_KEY_ENV):
        why = f"the admin key is a digest only (give the key in {ADMIN_KEY_ENV})"
    if why is not None:
        log.warning("tuning.mode is %s, but the tuner is not started: %s", tuning.mode, why)
        return None
    arguments = ["--config", str(args.config), "--record", str(server.record_path)]
    arguments += ["--parent", str(os.getpid()), "--log-level", args.log_level]
    if cfg.state.backend == "redis":  # one tuner per pool: the gateways' tuners share a lease
        arguments += ["--redis", cfg.state.url]
    return TunerChild(arguments)


def _exit_with(parent: int, every_s: float = 0.5) -> None:
    """Interrupt this process once `parent` is no longer its parent (it ended, and the
    orphan was adopted): a gateway killed outright cannot stop the tuner it started."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
