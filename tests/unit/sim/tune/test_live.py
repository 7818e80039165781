"""`kvgate tune`'s loop against a stand-in admin API: the recording it keeps and replays."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from routing.config.profiles import BUILTIN_PROFILES
from routing.config.schema import parse_config
from routing.traces.recorded import encode_header, encode_request
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import LocalRunner
from sim.tune.candidates import Candidate
from sim.tune.controller import TunerState
from sim.tune.live import GatewayAdmin, LiveTuner
from tests.unit.sim.tune.test_evaluate import backlog_trace


class Admin(GatewayAdmin):
    """The first gateway's admin API: round-robin live, two healthy replicas."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, dict[str, Any]]] = []

    def get(self, path: str) -> dict[str, Any]:
        if path == "/admin/tuning":
            spec = BUILTIN_PROFILES["round-robin"].model_dump(mode="json", exclude_unset=True)
            return {"live_profile": "round-robin", "live_spec": spec, "generation": 0}
        metrics = {"block_size": 16, "num_blocks": 400}
        return {"backends": [{"health": "healthy", "metrics": metrics}] * 2}

    def post(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        self.posted.append((path, dict(body)))
        return httpx.Response(200, request=httpx.Request("POST", "http://gateway" + path))


def _tuner(tmp_path: Path, tuning: dict[str, Any]) -> tuple[LiveTuner, Admin]:
    record = tmp_path / "recorded.jsonl"
    trace = [r for r in backlog_trace() if r.arrival_s <= 20.0]
    lines = [encode_header(datetime.now(UTC), 16, 4.0), *map(encode_request, trace)]
    record.write_bytes(b"".join(lines))
    base = {"mode": "shadow", "window_s": 10, "min_requests": 5, "seeds": 1, "search": 0,
            "candidates": ["prefix-aware"]}  # fmt: skip
    routing = {"policy": "round-robin"}
    config = parse_config({"routing": routing, "tuning": {**base, **tuning}})
    admin = Admin()
    return LiveTuner(config, admin, record, SimSettings(), LocalRunner(1)), admin


def test_the_recording_is_kept_and_replayed_for_the_lead_in_too(tmp_path: Path) -> None:
    tuner, admin = _tuner(tmp_path, {})
    assert tuner.tick() is not None
    assert tuner.tail is not None and tuner.tail.horizon_s == 20.0  # window + lead-in
    (_, report), *_ = admin.posted
    burst = sum(r.arrival_s <= 10.0 for r in backlog_trace())
    assert report["lead_in_requests"] > burst / 2 and report["requests"] < burst / 2
    cold, admin = _tuner(tmp_path, {"lead_in_s": 0})
    assert cold.tick() is not None and cold.tail is not None and cold.tail.horizon_s == 10.0
    (_, cold_report), *_ = admin.posted
    assert cold_report["lead_in_requests"] == 0
    assert cold_report["requests"] == report["requests"]
    # The window drains the burst's queues only when the burst is replayed before it.
    assert report["live_ttft_s"] > 5 * cold_report["live_ttft_s"]


def test_after_a_switch_the_lead_in_is_routed_by_the_profile_it_replaced(tmp_path: Path) -> None:
    tuner, admin = _tuner(tmp_path, {})
    assert tuner.tick() is not None  # round-robin routed the burst: a backlog
    (_, unswitched), *_ = admin.posted
    live = Candidate("round-robin", BUILTIN_PROFILES["round-robin"], "live")
    before = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"])
    tuner.state, tuner.since_s = TunerState(live, before), 9.0  # switched at 9 s
    tuner.evaluated_s = -math.inf
    assert tuner.tick() is not None
    _, switched = admin.posted[-1]
    # prefix-aware routed the burst before the switch and left no backlog behind.
    assert switched["lead_in_requests"] == unswitched["lead_in_requests"]
    assert switched["live_ttft_s"] < unswitched["live_ttft_s"] / 3
