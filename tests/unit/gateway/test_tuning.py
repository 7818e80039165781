from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.errors import BadRequestError, ConflictError, NotFoundError
from gateway.tuning import PROPOSAL, SWITCH, TuningBoard
from routing.config.profiles import BUILTIN_PROFILES, ProfileSpec
from routing.config.tuning import TuningSection

LOAD = BUILTIN_PROFILES["least-load"].model_dump(mode="json", exclude_unset=True)


class FakeLive:
    def __init__(self) -> None:
        self.name, self.spec, self.generation = "prefix-aware", BUILTIN_PROFILES["prefix-aware"], 0

    def use(self, name: str, spec: ProfileSpec) -> None:
        self.name, self.spec = name, spec

    def live(self) -> tuple[str, ProfileSpec, int]:
        return self.name, self.spec, self.generation


def _board(mode: str) -> tuple[TuningBoard, FakeLive, CollectorRegistry]:
    live, registry = FakeLive(), CollectorRegistry()
    board = TuningBoard(TuningSection(mode=mode), live.use, live.live, registry, clock=lambda: 5.0)
    return board, live, registry


def _switch(**over: Any) -> bytes:
    body = {"kind": "switch", "profile": "least-load", "spec": LOAD, "generation": 0}
    return orjson.dumps({**body, "reason": "faster", "predicted_gain": 0.1, **over})


def test_a_proposal_is_shown_and_sets_the_gauges() -> None:
    board, _, registry = _board("shadow")
    board.post(PROPOSAL, orjson.dumps({"predicted_gain": 0.12, "fidelity": 0.9, "reason": "r"}))
    assert board.state()["proposal"]["predicted_gain"] == 0.12
    assert registry.get_sample_value("kvgate_tuning_predicted_gain") == 0.12
    assert registry.get_sample_value("kvgate_tuning_fidelity") == 0.9
    with pytest.raises(BadRequestError):
        board.post(PROPOSAL, b"[1]")
    with pytest.raises(BadRequestError, match="JSON"):
        board.post(PROPOSAL, b"{")
    with pytest.raises(NotFoundError):
        board.post("/admin/tuning/other", b"{}")


def test_a_switch_needs_apply_and_the_current_generation() -> None:
    board, live, _ = _board("shadow")
    with pytest.raises(ConflictError, match="apply"):
        board.post(SWITCH, _switch())
    board, live, registry = _board("apply")
    live.generation = 1  # a reload came after the tuner's view
    with pytest.raises(ConflictError, match="reloaded"):
        board.post(SWITCH, _switch())
    with pytest.raises(BadRequestError, match="kind"):
        board.post(SWITCH, _switch(kind="sideways", generation=1))
    answer = board.post(SWITCH, _switch(generation=1))
    assert answer["switched"] and (live.name, live.spec) == ("least-load", ProfileSpec(**LOAD))
    state = board.state()
    assert state["live_profile"] == "least-load" and state["previous_profile"] == "prefix-aware"
    assert state["switches"] == [
        {"at": 5.0, "kind": "switch", "from": "prefix-aware", "to": "least-load",
         "predicted_gain": 0.1, "reason": "faster"}
    ]  # fmt: skip
    assert registry.get_sample_value("kvgate_tuning_switches_total", {"kind": "switch"}) == 1
