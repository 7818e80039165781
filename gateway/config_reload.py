"""Reloading the config file while serving: on SIGHUP, `POST /admin/reload` or `--watch-config`.

The file (`--watch-config S`: its mtime, size and inode polled every S seconds) is loaded again
with the start-up flags and `KVGATE_*` variables, validated, and its profiles built; any error
rejects it (logged with the field's path) and the running config stays. Else it is applied in
one step of the event loop (backends through `RuntimeBackends`), so no request sees half of it:

| applied live                                       | needs a restart                         |
|----------------------------------------------------|-----------------------------------------|
| `backends` (added, removed, changed),              | `server`, `upstream`, `discovery`,      |
| `routing.policy`, `profiles`, `session_header`,    | `routing.prefix`, `ttft`, `state`,      |
| `allow_policy_header`; `health` but its timeouts   | `security`, `admission`, `tokenizers`   |

A changed field on the right (or `tuning`) is reported, a warning each, and keeps its value;
`security.api_keys_file` reloads apart; stateful pickers start over; a tuner's profile goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from gateway.health_settings import health_policy, probe_readmit_s, probe_settings, scrape_settings
from gateway.router import RequestRouter
from gateway.runtime_backends import RuntimeBackends
from health.pool import BackendPool
from health.prober import Prober
from health.scraper import Scraper
from routing.config.profiles import ProfileSpec, RoutingSection, effective_profiles
from routing.config.schema import ConfigError, GatewayConfig, HealthSection
from routing.registry import PluginError
from routing.scheduler import Scheduler

log = logging.getLogger(__name__)

LIVE_ROUTING = ("policy", "allow_policy_header", "session_header", "profiles")
LIVE_HEALTH = (
    "probe_interval_s",
    "fail_threshold",
    "success_threshold",
    "passive_fail_threshold",
    "ejection_base_s",
    "ejection_max_s",
    "model_refresh_s",
    "scrape_interval_s",
    "metrics_stale_after_s",
    "max_scrape_bytes",
)
_MISSING = object()


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths of the leaves that differ (a list is one leaf)."""
    out: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        a, b, path = old.get(key, _MISSING), new.get(key, _MISSING), f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_fields(a, b, path + ".")
        elif a != b:
            out.append(path)
    return out


def is_live(path: str) -> bool:
    """Whether a reload applies the field at `path` (see the module's table)."""
    section, _, rest = path.partition(".")
    name = rest.partition(".")[0]
    if section == "routing":
        return name in LIVE_ROUTING
    if section == "health":
        return name in LIVE_HEALTH
    return section == "backends"


def live_config(old: GatewayConfig, new: GatewayConfig) -> GatewayConfig:
    """The running config with `new`'s live fields."""
    routing = old.routing.model_copy(update={f: getattr(new.routing, f) for f in LIVE_ROUTING})
    health = old.health.model_copy(update={f: getattr(new.health, f) for f in LIVE_HEALTH})
    return old.model_copy(update={"backends": new.backends, "routing": routing, "health": health})


class LiveConfig:
    """The running config, and the objects a reload changes in place."""

    def __init__(
        self,
        config: GatewayConfig,
        backends: RuntimeBackends,
        router: RequestRouter,
        pool: BackendPool,
        build_scheduler: Callable[[RoutingSection], Scheduler],
    ) -> None:
        self.config = config
        self._backends = backends
        self._router = router
        self._pool = pool
        self._build_scheduler = build_scheduler
        self._pollers: tuple[Prober, Scraper] | None = None
        self.generation = 0  # reloads applied: a tuner's switch names the one it saw

    def watch_health(self, prober: Prober, scraper: Scraper) -> None:
        """The running probes and scrapes, whose settings a reload replaces."""
        self._pollers = (prober, scraper)

    def use_profile(self, name: str, spec: ProfileSpec) -> None:
        """The tuner's switch: `spec` as profile `name`, the default policy from now on (a
        reload installs the file's routing again)."""
        old = self.config
        profiles = {**old.routing.profiles, name: spec}
        routing = old.routing.model_copy(update={"policy": name, "profiles": profiles})
        try:
            scheduler = self._build_scheduler(routing)
        except (PluginError, ValueError) as exc:
            raise ConfigError(f"profile {name}: {exc}") from None
        self._route_with(scheduler, routing, old.health, rebuild_prefill=True)
        self.config = old.model_copy(update={"routing": routing})

    def _route_with(
        self,
        scheduler: Scheduler,
        routing: RoutingSection,
        health: HealthSection,
        *,
        rebuild_prefill: bool,
    ) -> None:
        """Route with `scheduler` on `routing` (a P/D planner's prefill scheduler rebuilt from
        it when `rebuild_prefill`)."""
        if rebuild_prefill and (planner := self._router.planner) is not None:
            planner.prefill_scheduler = self._build_scheduler(routing)
        self._router.reconfigure(scheduler, routing, probe_readmit_s(health))

    def live_profile(self) -> tuple[str, ProfileSpec, int]:
        """The default policy's name and profile, and the reload generation."""
        routing = self.config.routing
        return routing.policy, effective_profiles(routing)[routing.policy], self.generation

    def apply(self, new: GatewayConfig) -> dict[str, Any]:
        """Apply `new`'s live fields (ConfigError, nothing changed, if it cannot be); the
        report says what changed and which fields wait for a restart."""
        old = self.config
        merged = live_config(old, new)
        if not merged.backends and not merged.discovery.pool:
            raise ConfigError("backends: none left and no discovery.pool: nothing to route to")
        scheduler = self._router.scheduler
        if merged.routing != old.routing:
            try:
                scheduler = self._build_scheduler(merged.routing)
            except (PluginError, ValueError) as exc:
                raise ConfigError(f"routing: {exc}") from None
        restart = [p for p in changed_fields(old.model_dump(), new.model_dump()) if not is_live(p)]
        changes = self._backends.apply_config(merged.backends)
        if merged.health != old.health:
            self._apply_health(merged.health)
        if merged.routing != old.routing or merged.health != old.health:
            rebuild = merged.routing != old.routing
            self._route_with(scheduler, merged.routing, merged.health, rebuild_prefill=rebuild)
        self.config = merged
        self.generation += 1
        report = {
            "applied": True,
            "backends": {
                "added": list(changes.added),
                "removed": list(changes.removed),
                "updated": list(changes.updated),
            },
            "policy": merged.routing.policy,
            "routing_changed": merged.routing != old.routing,
            "health_changed": merged.health != old.health,
            "restart_required": restart,
        }
        log.info(
            "config reloaded: backends +%d -%d ~%d, policy %s%s",
            len(changes.added),
            len(changes.removed),
            len(changes.updated),
            merged.routing.policy,
            " (profiles rebuilt)" if report["routing_changed"] else "",
        )
        if restart:
            log.warning(
                "config reload: %s changed but take effect only after a restart; the running "
                "values stay",
                ", ".join(restart),
            )
        return report

    def _apply_health(self, h: HealthSection) -> None:
        self._pool.set_policy(health_policy(h))
        self._pool.stale_after_s = h.metrics_stale_after_s
        if self._pollers is not None:
            prober, scraper = self._pollers
            # The timeouts stay: the probe client's own limits were cut to them at start.
            timeout = prober.settings.timeout_s
            prober.settings = probe_settings(h.model_copy(update={"probe_timeout_s": timeout}))
            timeout = scraper.settings.timeout_s
            scraper.settings = scrape_settings(h.model_copy(update={"scrape_timeout_s": timeout}))


Stamp = tuple[int, int, int]


class ConfigReloader:
    """Reloads on `request()` (SIGHUP) and, with `watch_s`, when `path` changes."""

    def __init__(
        self,
        load: Callable[[], GatewayConfig],
        apply: Callable[[GatewayConfig], dict[str, Any]],
        path: str | None = None,
        watch_s: float | None = None,
    ) -> None:
        self._load = load  # blocking (reads the file): run in a worker thread
        self._apply = apply
        self._path = path
        self._watch_s = watch_s if path is not None else None
        self._requested = asyncio.Event()
        self._lock = asyncio.Lock()  # one reload at a time, applied in the order loaded

    def request(self) -> None:
        """Reload soon (a signal handler's callback, on the event loop)."""
        self._requested.set()

    async def reload(self, reason: str) -> dict[str, Any]:
        """Load, validate and apply the config now; ConfigError (logged, nothing changed) if
        it is bad."""
        async with self._lock:
            try:
                new = await asyncio.to_thread(self._load)
                return self._apply(new)
            except ConfigError as exc:
                shown = str(exc).replace("\n  ", "; ")
                log.error(
                    "config reload (%s) rejected, the running config stays: %s", reason, shown
                )
                raise

    async def run(self) -> None:
        """Wait for requests (and poll the file if watched) forever; cancel to stop."""
        seen = await self._stamp()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._requested.wait(), self._watch_s)
            requested = self._requested.is_set()
            self._requested.clear()
            stamp = await self._stamp()
            changed = stamp is not None and stamp != seen
            seen = stamp or seen
            if requested or changed:
                with contextlib.suppress(ConfigError):  # logged; the next change may fix it
                    await self.reload("SIGHUP" if requested else f"{self._path} changed")

    async def _stamp(self) -> Stamp | None:
        if self._path is None or self._watch_s is None:
            return None
        return await asyncio.to_thread(_file_stamp, self._path)


def _file_stamp(path: str) -> Stamp | None:
    # The inode too: a Kubernetes ConfigMap volume swaps a symlink to a new file.
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)
