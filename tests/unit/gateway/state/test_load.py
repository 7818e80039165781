"""Load reports: sent when they change or as a heartbeat, summed, expired (injected clock)."""

from __future__ import annotations

import pytest

from gateway.state.codec import BadEntryError
from gateway.state.load import LoadReport, LoadSharing, decode_report, encode_report


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_report_survives_the_round_trip() -> None:
    r = LoadReport("gw", {"b1": (3, 1200), "b2": (0, 0)}, 17)
    assert decode_report(encode_report(r)) == r
    with pytest.raises(BadEntryError):
        decode_report(b"\x93\x01")


def test_reports_go_when_the_counts_change_or_the_heartbeat_is_due() -> None:
    clock, local = _Clock(), {"b1": (0, 0), "b2": (2, 300)}
    load = LoadSharing("me", lambda: local, clock=clock, heartbeat_s=1.0)
    first = load.outgoing()
    assert first is not None and first.counts == {"b2": (2, 300)}  # idle backends left out
    assert load.outgoing() is None
    local["b1"] = (1, 50)
    changed = load.outgoing()
    assert changed is not None and changed.counts == {"b1": (1, 50), "b2": (2, 300)}
    clock.now += 1.0
    assert load.outgoing() is not None  # the heartbeat, unchanged
    assert load.sent == 3


def test_the_other_gateways_reports_are_summed_and_expire_with_their_lease() -> None:
    clock, told = _Clock(), []
    load = LoadSharing("me", dict, told.append, clock=clock, ttl_s=3.0)
    load.receive(LoadReport("a", {"b1": (2, 100)}, 0))
    load.receive(LoadReport("b", {"b1": (1, 10), "b2": (4, 0)}, 0))
    load.receive(LoadReport("me", {"b1": (50, 50)}, 0))  # its own: ignored
    assert load.remote == {"b1": (3, 110), "b2": (4, 0)} and load.peers == 2
    clock.now += 2.0
    load.receive(LoadReport("a", {"b1": (1, 0)}, 0))  # a's new report replaces its old one
    assert load.remote == {"b1": (2, 10), "b2": (4, 0)}
    clock.now += 1.5  # b silent for 3.5 s: its lease is over
    load.expire()
    assert load.remote == {"b1": (1, 0)} and load.peers == 1
    load.clear()
    assert load.remote == {} and load.peers == 0
    assert told[-1] == {} and len(told) == 5  # one call per change


def test_clear_makes_the_next_report_go_out_again() -> None:
    load = LoadSharing("me", lambda: {"b1": (1, 1)}, clock=_Clock())
    assert load.outgoing() is not None and load.outgoing() is None
    load.clear()
    assert load.outgoing() is not None
