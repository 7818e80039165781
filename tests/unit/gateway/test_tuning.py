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


def _published(seq: int, **over: Any) -> bytes:
    return orjson.dumps({**orjson.loads(_switch(**over)), "seq": seq, "tuner": "t1"})


def test_the_pools_published_profile_is_adopted_once_in_apply_mode() -> None:
    board, live, registry = _board("apply")
    assert board.adopt(None) is False and board.adopt(b"{not json") is False
    assert board.adopt(_published(3)) is True
    assert live.name == "least-load" and board.state()["previous_profile"] == "prefix-aware"
    [event] = board.state()["switches"]
    assert event["kind"] == "adopt" and "faster" in event["reason"]
    assert registry.get_sample_value("kvgate_tuning_switches_total", {"kind": "adopt"}) == 1
    live.name, live.spec = "prefix-aware", BUILTIN_PROFILES["prefix-aware"]  # a reload won
    assert board.adopt(_published(3)) is False and live.name == "prefix-aware"  # not again
    assert board.adopt(_published(2)) is False  # older
    assert board.adopt(_published(4)) is True and live.name == "least-load"  # a new switch
    assert board.adopt(_published(5)) is False  # the live profile already: nothing to do
    assert registry.get_sample_value("kvgate_tuning_switches_total", {"kind": "adopt"}) == 2


@pytest.mark.parametrize("mode", ["shadow", "off"])
def test_a_published_profile_is_not_adopted_outside_apply(mode: str) -> None:
    board, live, _ = _board(mode)
    assert board.adopt(_published(1)) is False and live.name == "prefix-aware"


def test_an_invalid_published_profile_is_refused() -> None:
    board, live, _ = _board("apply")
    assert board.adopt(_published(1, kind="sideways")) is False
    assert board.adopt(orjson.dumps({"profile": "x"})) is False  # no sequence number
    assert live.name == "prefix-aware" and board.state()["switches"] == []
