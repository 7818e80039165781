"""`kvgate tune`: the self-tuning loop beside a running gateway, in a process of its own.

Every `tuning.interval_s` it reads the gateway's recording (`server.record_path`: hashes,
lengths and observed TTFTs only), takes the last `tuning.window_s` of it (after the last
switch, so a switch is judged on its own traffic) and the `tuning.lead_in_s` before that
(replayed first, unmeasured, routed by the profile that ran then), reads the fleet's shape from
`GET /admin/backends` (healthy replicas, KV block size and count from their scrapes) and the
live profile from `GET /admin/tuning`, runs `assess` and `controller.step`, posts the proposal
(`/admin/tuning/proposal`) and, in mode `apply`, a switch or rollback (`/admin/tuning/switch`).
It reads the recording incrementally (`RecordingTail`) and skips an evaluation with fewer than
`tuning.min_new_requests` requests new since the last. Engine timing: `tuning.engine_profile`
as named or fitted to the window's observed TTFTs (`timing`), reported with the `fidelity`.
A reload seen in `generation` resets the loop. Several gateways: proposals and switches go to
each (the first is read); several tuners: only the holder of a Redis lease (`lease`) evaluates,
and it publishes each switch there for the pool's other gateways (`gateway.tuning.follow`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from routing.config.profiles import ProfileSpec
from routing.config.schema import GatewayConfig
from routing.config.tuning import published_profile_key
from routing.traces import TraceRequest
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import SweepRunner
from sim.tune.candidates import Candidate, candidate_set, named
from sim.tune.controller import Action, TunerState, step
from sim.tune.evaluate import FleetShape, ran_most, span
from sim.tune.lease import Lease
from sim.tune.proposal import Proposal, assess
from sim.tune.recording import RecordingTail
from sim.tune.timing import Timing, fit_timing, named_timing

log = logging.getLogger(__name__)
TIMEOUT_S = 10.0


class GatewayAdmin:
    """The gateway's admin API, as far as the tuner uses it."""

    def __init__(self, url: str, key: str | None = None) -> None:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=TIMEOUT_S)

    def close(self) -> None:
        self._client.close()

    def get(self, path: str) -> dict[str, Any]:
        r = self._client.get(path)
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    def post(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        return self._client.post(path, json=dict(body))


def fleet_shape(backends: Mapping[str, Any], engine_profile: str) -> FleetShape:
    """Healthy (or unknown) backends, with the block size and count the first scrape gives."""
    live = [b for b in backends.get("backends", []) if b.get("health") != "unhealthy"]
    block_size = num_blocks = None
    for b in live:
        metrics = b.get("metrics") or {}
        if metrics.get("block_size") and metrics.get("num_blocks"):
            block_size, num_blocks = int(metrics["block_size"]), int(metrics["num_blocks"])
            break
    return FleetShape.of(max(1, len(live)), engine_profile, block_size, num_blocks)


@dataclass(slots=True)
class LiveTuner:
    """The loop's state between ticks (`tick` runs one evaluation)."""

    config: GatewayConfig
    admin: GatewayAdmin
    record_path: Path
    base: SimSettings
    runner: SweepRunner
    others: list[GatewayAdmin] = field(default_factory=list)  # the pool's other gateways
    lease: Lease | None = None  # several tuners: only the lease holder evaluates
    state: TunerState | None = None
    generation: int = -1
    since_s: float = -math.inf  # the recording's clock at the last switch
    ticks: int = 0
    timing: str | None = None  # overrides tuning.engine_timing (`kvgate tune --engine-timing`)
    evaluated_s: float = -math.inf  # the latest arrival the last evaluation saw
    tail: RecordingTail | None = None

    def tick(self, cpu: Callable[[], float] = time.process_time) -> Action | None:
        """One evaluation; the action taken (None: too little traffic)."""
        tuning = self.config.tuning
        if self.lease is not None and not self.lease.acquire():
            log.info("tuning: another tuner holds %s, standing by", self.lease.key)
            self.state = None
            return None
        board = self.admin.get("/admin/tuning")
        spec = ProfileSpec.model_validate(board["live_spec"])
        live = Candidate(board["live_profile"], spec, "live")
        if self.state is None or board["generation"] != self.generation:
            self.state, self.generation, self.since_s = TunerState(live), board["generation"], -1.0
        elif self.state.live.name != live.name:  # switched by someone else: start from it
            self.state = TunerState(live)
        horizon = tuning.window_s + tuning.lead_in
        tail = self.tail
        if tail is None or tail.path != self.record_path or tail.horizon_s != horizon:
            tail = self.tail = RecordingTail(self.record_path, horizon)
        trace = tail.read()
        end = trace[-1].arrival_s if trace else 0.0
        length = min(tuning.window_s, end - self.since_s)
        state = self.state  # the lead-in is replayed under the profile that ran most of it
        ran = [(-math.inf, state.previous), (self.since_s, state.live)] if state.previous else []
        lead_in = ran_most(ran or [(-math.inf, state.live)], end - length, tuning.lead_in)
        part = span(trace, end, length, tuning.lead_in, lead_in)
        recent = part.measured
        self.ticks += 1
        if len(recent) < tuning.min_requests:
            log.info("tuning: %d requests in the window: too few", len(recent))
            return None
        new = sum(r.arrival_s > self.evaluated_s for r in trace)
        if new < tuning.min_new_requests:
            log.info("tuning: %d requests since the last evaluation: skipped", new)
            return None
        self.evaluated_s = end
        shape = fleet_shape(self.admin.get("/admin/backends"), tuning.engine_profile)
        timing = self._timing(recent, shape)
        shape = FleetShape(shape.replicas, timing.engine)
        policy = self.config.routing.policy
        others = named(self.config.routing, list(dict.fromkeys([policy, *tuning.candidates])))
        home = others[0]
        others += [self.state.previous] if self.state.previous else []
        candidates = candidate_set(self.state.live, others, tuning.search, seed=self.ticks)
        proposal = assess(part, candidates, shape, self.base, tuning, runner=self.runner)
        self.state, action = step(self.state, proposal, tuning.mode, tuning.rollback_tolerance,
                                  home=home, min_gain=tuning.min_gain,
                                  windows=tuning.check_windows)  # fmt: skip
        report = _report(proposal, action, shape, timing, cpu())
        for admin in (self.admin, *self.others):
            admin.post("/admin/tuning/proposal", report).raise_for_status()
        if action.kind in ("switch", "rollback"):
            self._switch(action, end)
        log.info(
            "tuning %s: %s (%d requests, engine timing %s, fidelity %s, replays %.1f s CPU)",
            action.kind,
            action.reason,
            report["requests"],
            report["engine_timing"],
            report["fidelity"],
            report["replay_cpu_s"],
        )
        return action

    def _timing(self, recent: list[TraceRequest], shape: FleetShape) -> Timing:
        tuning = self.config.tuning
        if (self.timing or tuning.engine_timing) == "fitted":
            return fit_timing(recent, shape.engine, tuning.fit_min_requests)
        return named_timing(shape.engine, sum(r.ttft_s is not None for r in recent))

    def _switch(self, action: Action, end: float) -> None:
        body = {
            "kind": action.kind,
            "profile": action.target.name,
            "spec": action.target.profile.model_dump(mode="json", exclude_unset=True),
            "reason": action.reason,
            "generation": self.generation,
            "predicted_gain": action.gain,
        }
        r = self.admin.post("/admin/tuning/switch", body)
        key = published_profile_key(self.config.state.namespace, self.config.discovery.pool)
        if r.status_code == 409:  # reloaded meanwhile, or not in apply mode: start over
            log.warning("tuning: the gateway refused the switch: %s", r.text)
            self.state = None
            if self.lease is not None:  # the reload's profile stays, here and for newcomers
                self.lease.withdraw(key)
            return
        r.raise_for_status()
        self.since_s = end
        if self.lease is not None:  # for gateways not listed here, or started later
            self.lease.publish(key, body)
        for other in self.others:  # every gateway of the pool routes with the same profile
            generation = other.get("/admin/tuning")["generation"]
            answer = other.post("/admin/tuning/switch", {**body, "generation": generation})
            if answer.status_code != 200:
                log.warning("tuning: a gateway refused the switch: %s", answer.text)


def _report(
    proposal: Proposal, action: Action, shape: FleetShape, timing: Timing, cpu_s: float
) -> dict[str, Any]:
    return {
        **proposal.to_json(),
        "action": action.kind,
        "action_target": action.target.name,
        "action_reason": action.reason,
        "fleet": shape.describe(),
        "engine_timing": timing.describe(),
        "engine_fit": timing.to_json(),
        "tuner_cpu_s": round(cpu_s, 3),
    }
