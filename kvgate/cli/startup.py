"""What `serve` and `epp` do before they run: logging set up, and the gateway's runtime built
from the config, flags and variables (in `reloadable_runtime` alone, for every command)."""

from __future__ import annotations

import argparse
import functools
import logging
from typing import TYPE_CHECKING

from kvgate.cli.effective import effective_config
from kvgate.cli.options import compiled_extensions
from routing.config.schema import ConfigError

if TYPE_CHECKING:
    from gateway.runtime import Runtime
    from gateway.workers.context import WorkerContext


def configure_logging(args: argparse.Namespace) -> None:
    """Root logging for `serve` and `epp`: one stderr handler, `--log-format` lines."""
    from gateway.access_log import RequestIdFilter
    from gateway.log_format import TEXT_FORMAT, JsonFormatter

    handler = logging.StreamHandler()
    json = args.log_format == "json"
    handler.setFormatter(JsonFormatter() if json else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(RequestIdFilter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    extensions = compiled_extensions()
    if extensions.startswith("pure Python"):  # said once at start-up: slower, same results
        logging.getLogger("kvgate").info("%s", extensions)


def reloadable_runtime(args: argparse.Namespace, workers: WorkerContext | None = None) -> Runtime:
    """The gateway's runtime from the config, flags and variables, reloaded from them on
    SIGHUP, `POST /admin/reload` and (`--watch-config`) when the file changes."""
    from gateway.compose import build_runtime
    from gateway.config_reload import ConfigReloader

    if args.watch_config is not None and not args.watch_config > 0:
        raise ConfigError(f"--watch-config: {args.watch_config} is not a positive interval")
    runtime = build_runtime(effective_config(args), workers=workers)
    load = functools.partial(effective_config, args)
    runtime.reloader = ConfigReloader(load, runtime.reconfigure, args.config, args.watch_config)
    return runtime
