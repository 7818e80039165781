"""The gateway's side of self-tuning: `/admin/tuning`, the tuner's reports and switches.

The tuner (`kvgate tune`, a process of its own: nothing here runs on the request path) posts
each proposal (`POST /admin/tuning/proposal`: predicted gain, spread, fidelity, the chosen
profile) and, in mode `apply`, switches (`POST /admin/tuning/switch`: `switch` or `rollback`,
a profile and the reason). A switch replaces the live routing profile in one step of the
event loop (`LiveConfig.use_profile`) and keeps the one it replaced; each is logged, counted
(`kvgate_tuning_switches_total{kind}`) and listed. A config reload wins: it installs the file's
routing, and `generation` tells the tuner to start over from it. `GET /admin/tuning` shows it all.
With shared state in Redis and mode `apply`, `follow` reads the profile the pool's tuner
published there (`kvgate tune --redis`) and installs it once (`adopt`): a gateway the tuner
does not post to, or started after the switch, routes as the rest of the pool.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.asgi import parse_json_body
from gateway.errors import BadRequestError, ConflictError, NotFoundError
from gateway.state.link import RedisLink
from routing.config.profiles import ProfileSpec
from routing.config.schema import ConfigError
from routing.config.tuning import TuningSection

log = logging.getLogger(__name__)

HISTORY = 50  # switches listed by GET /admin/tuning
FOLLOW_S = 5.0  # longest wait between two reads of the pool's published profile
TUNING = "/admin/tuning"
PROPOSAL = TUNING + "/proposal"
SWITCH = TUNING + "/switch"


class SwitchRequest(BaseModel):
    """`POST /admin/tuning/switch`'s body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(pattern="^(switch|rollback)$")
    profile: str = Field(min_length=1)
    spec: ProfileSpec
    reason: str = ""
    generation: int = Field(ge=0, description="the config generation the tuner started from")
    predicted_gain: float | None = None


class TuningBoard:
    """What the tuner reported and did, and the switch itself (see the module docstring)."""

    def __init__(
        self,
        section: TuningSection,
        use_profile: Callable[[str, ProfileSpec], None],
        live: Callable[[], tuple[str, ProfileSpec, int]],
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.section = section
        self._use_profile = use_profile
        self._live = live  # (live profile's name, its spec, config generation)
        self._clock = clock
        self.proposal: dict[str, Any] | None = None
        self.previous: str | None = None
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.adopted: int | None = None  # the last published profile's sequence number seen
        self._switches = Counter(
            "kvgate_tuning_switches_total",
            "Live routing-profile changes by the tuner (switch, rollback; adopt: the pool's "
            "published profile)",
            ["kind"],
            registry=registry,
        )
        for kind in ("switch", "rollback", "adopt"):
            self._switches.labels(kind)
        self._gain = Gauge(
            "kvgate_tuning_predicted_gain",
            "The last proposal's predicted mean-TTFT gain over the live profile (fraction)",
            registry=registry,
        )
        self._spread = Gauge(
            "kvgate_tuning_predicted_gain_spread",
            "The last proposal's gain: standard deviation across seeds",
            registry=registry,
        )
        self._fidelity = Gauge(
            "kvgate_tuning_fidelity",
            "Replayed / observed mean TTFT of the live profile in the last window (1: exact)",
            registry=registry,
        )
        self._cpu = Gauge(
            "kvgate_tuning_cpu_seconds",
            "CPU seconds the tuner process has used, as it last reported",
            registry=registry,
        )

    def post(self, path: str, body: bytes) -> dict[str, Any]:
        """`POST /admin/tuning/proposal` or `/switch` with a JSON body."""
        data = parse_json_body(body)
        if path == PROPOSAL:
            return self.report(data)
        if path == SWITCH:
            return self.switch(data)
        raise NotFoundError(f"no route for POST {path}")

    def report(self, body: Any) -> dict[str, Any]:
        """A proposal from the tuner (a JSON object), shown as is and in the gauges."""
        if not isinstance(body, dict):
            raise BadRequestError("a proposal must be a JSON object")
        self.proposal = {**body, "received_at": self._clock()}
        for gauge, key in ((self._gain, "predicted_gain"), (self._spread, "spread")):
            if isinstance(value := body.get(key), int | float):
                gauge.set(value)
        if isinstance(value := body.get("fidelity"), int | float):
            self._fidelity.set(value)
        if isinstance(value := body.get("tuner_cpu_s"), int | float):
            self._cpu.set(value)
        log.info("tuning proposal: %s", body.get("reason", "(no reason given)"))
        return {"accepted": True}

    def switch(self, body: Any) -> dict[str, Any]:
        """Switch the live profile as the tuner asks (409 unless mode is apply, or when a
        reload came after the tuner's view)."""
        try:
            req = SwitchRequest.model_validate(body)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise BadRequestError(f"{where}: {err['msg']}", code="invalid_switch") from None
        if self.section.mode != "apply":
            raise ConflictError(f"tuning mode is {self.section.mode}: switches need apply")
        before, _, generation = self._live()
        if req.generation != generation:
            raise ConflictError("the config was reloaded since: the reload's profile stays")
        try:
            self._use_profile(req.profile, req.spec)
        except ConfigError as exc:
            raise BadRequestError(str(exc), code="invalid_profile") from None
        return {"switched": True, **self._switched(req.kind, before, req)}

    def adopt(self, raw: bytes | str | None) -> bool:
        """Install the pool's published profile (`follow`), in mode apply, when it is newer
        than the last one seen here and not the live one already; whether it was installed.
        A reload after it wins: the same publication is not installed again."""
        if raw is None:
            return False
        try:
            record = json.loads(raw)
            seq = record.pop("seq")
            record.pop("tuner", None)
            req = SwitchRequest.model_validate(record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("tuning: unreadable published profile: %s", exc)
            return False
        if not isinstance(seq, int) or (self.adopted is not None and seq <= self.adopted):
            return False
        self.adopted = seq
        before, spec, _ = self._live()
        if self.section.mode != "apply" or (before == req.profile and spec == req.spec):
            return False
        try:
            self._use_profile(req.profile, req.spec)
        except ConfigError as exc:
            log.warning("tuning: the published profile %s is not valid here: %s", req.profile, exc)
            return False
        self._switched("adopt", before, req)
        return True

    def _switched(self, kind: str, before: str, req: SwitchRequest) -> dict[str, Any]:
        self.previous = before
        self._switches.labels(kind).inc()
        reason = req.reason if kind != "adopt" else f"the pool's tuner switched: {req.reason}"
        event = {
            "at": self._clock(),
            "kind": kind,
            "from": before,
            "to": req.profile,
            "predicted_gain": req.predicted_gain,
            "reason": reason,
        }
        self.history.append(event)
        log.warning("tuning %s: %s -> %s: %s", kind, before, req.profile, reason)
        return event

    def state(self) -> dict[str, Any]:
        """`GET /admin/tuning`."""
        name, spec, generation = self._live()
        return {
            "mode": self.section.mode,
            "settings": self.section.model_dump(mode="json"),
            "live_profile": name,
            "live_spec": spec.model_dump(mode="json", exclude_unset=True),
            "previous_profile": self.previous,
            "generation": generation,
            "proposal": self.proposal,
            "switches": list(self.history),
        }


async def follow(link: RedisLink, board: TuningBoard, key: str) -> None:
    """Read the pool's published profile at `key` every `FOLLOW_S` seconds (at most the
    tuning interval) and let `board` adopt it; Redis down: tried again after the backoff."""
    get = link.commands.get
    while True:
        raw = await link.attempt(lambda: get(key), link.settings.command_timeout_s)
        board.adopt(raw)
        await asyncio.sleep(min(FOLLOW_S, board.section.interval_s))
