"""Several gateways in one replay: spread, sharing late or not at all, determinism, the CLI."""

from __future__ import annotations

import dataclasses
import io
import random
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

import sim.replay.cli
import sim.replay.gateways
from kvgate.cli import build_parser
from routing.config.profiles import RoutingSection
from routing.traces import TraceRequest
from routing.traces.recorded import encode_header, encode_request
from routing.types import RoutingRequest
from scoring.stack import RoutingStack
from sim.plots import PlotsUnavailable
from sim.replay import Replay, ReplayResult, SimSettings
from sim.replay.gateways import Spread
from sim.workloads import family
from tests.unit.sim.replay.synthetic import SMALL, recording, tenant_trace


def _replay(trace: list[TraceRequest], policy: str, **settings: object) -> ReplayResult:
    base = {"replicas": 4, "seed": 7}
    return Replay(trace, policy, SMALL, SimSettings(**{**base, **settings})).run()  # type: ignore[arg-type]


def _fingerprint(r: ReplayResult) -> tuple[object, ...]:
    return (
        r.dispatched,
        r.requests,
        r.prefix_hits,
        r.prefix_queries,
        r.steps,
        tuple(r.log.ttft_s),
        tuple(r.log.e2e_s),
        tuple(r.log.replica),
    )


def test_one_gateway_replays_as_before_whatever_the_sharing_options() -> None:
    trace = tenant_trace(300, seed=3)
    alone = _replay(trace, "prefix-aware")
    assert alone.dispatched == (50, 97, 59, 94)  # the golden test's figures
    for options in (
        {"gateways": 1},
        {"gateways": 1, "shared": False},
        {"gateways": 1, "spread": "session", "sync_delay_s": 0.5},
    ):
        assert _fingerprint(_replay(trace, "prefix-aware", **options)) == _fingerprint(alone)


def test_requests_spread_round_robin_or_by_session() -> None:
    def request(session: str | None) -> TraceRequest:
        return TraceRequest(0.0, 10, 1, (1,), 16, session=session)

    by_request = Spread(3, "request")
    assert [by_request.pick(request("chat-1")) for _ in range(4)] == [0, 1, 2, 0]
    by_session = Spread(3, "session")
    picks = {s: by_session.pick(request(s)) for s in ("chat-1", "chat-2", "chat-3", "chat-4")}
    assert all(by_session.pick(request(s)) == g for s, g in picks.items())
    assert len(set(picks.values())) > 1
    assert [by_session.pick(request(None)) for _ in range(3)] == [0, 1, 2]


class _InFlightSeen:
    """Records, per request, the in-flight counts its gateway saw."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, ...]] = {}

    def decided(self, now, request: RoutingRequest, snapshots, scraped, decision) -> None:  # type: ignore[no-untyped-def]
        self.seen[request.request_id] = tuple(s.in_flight for s in snapshots)

    def first_token(self, now: float, request_id: str) -> None:
        pass

    def finished(self, now: float, request_id: str) -> None:
        pass


@pytest.mark.parametrize(("gap_s", "sees"), [(0.04, 0), (0.06, 1)])
def test_a_replay_shows_one_gateways_dispatch_to_the_next_after_the_sync_delay(
    gap_s: float, sees: int
) -> None:
    # Two long requests a gap apart: the first at gateway 0, the second at gateway 1.
    trace = [
        TraceRequest(0.0, 1000, 200, tuple(range(16)), 64),
        TraceRequest(gap_s, 1000, 200, tuple(range(100, 116)), 64),
    ]
    section, _, register = recording()
    observer = _InFlightSeen()
    settings = SimSettings(replicas=3, gateways=2, sync_delay_s=0.05, routing=section)
    Replay(trace, "recorded", SMALL, settings, register=register, observer=observer).run()
    assert sum(observer.seen["1"]) == sees
    unshared = dataclasses.replace(settings, shared=False)
    observer = _InFlightSeen()
    Replay(trace, "recorded", SMALL, unshared, register=register, observer=observer).run()
    assert sum(observer.seen["1"]) == 0


@pytest.mark.parametrize("shared", [True, False])
def test_several_gateways_are_deterministic_and_their_counters_return_to_zero(
    shared: bool,
) -> None:
    trace = tenant_trace(200, seed=5, rate=30.0)
    options = {"gateways": 3, "shared": shared, "sync_delay_s": 0.02}
    for policy in ("prefix-aware", "power-of-two"):
        first = _replay(trace, policy, **options)
        assert _fingerprint(first) == _fingerprint(_replay(trace, policy, **options))
    settings = SimSettings(replicas=4, seed=7, **options)  # type: ignore[arg-type]
    replay = Replay(trace, "prefix-aware", SMALL, settings)
    assert replay.run().requests == 200
    views = [v for g in replay.gateways for v in g.views]
    assert len(views) == 12
    assert all(v.in_flight == 0 and v.pending_prefill_tokens == 0 for v in views)
    assert replay.sharing is None or replay.sharing.pending() == 0


def _family_trace(path: Path) -> Path:
    """16 tenants of 2,000-token system prompts, zipf, ~300 chat turns at 8 requests/s."""
    cell = family.FamilyCell(16, 2000, "zipf", conversations=100, seed=1)
    chats = family.chats(cell)
    trace = family.chat_trace(chats, family.open_arrivals(chats, 8.0, 5.0, seed=1), 16)
    lines = [encode_header(datetime(2026, 12, 1, tzinfo=UTC), 16, 4.0)]
    lines += [encode_request(r) for r in trace]
    path.write_bytes(b"".join(lines))
    return path


def _kvgate_sim(trace: Path, out: Path, *options: str) -> tuple[dict[str, object], str]:
    argv = [
        "sim", "--trace", str(trace), "--profile", "demo", "--replicas", "4",
        "--policies", "prefix-aware", "--out", str(out), *options,
    ]  # fmt: skip
    printed = io.StringIO()
    assert sim.replay.cli.run_sim(build_parser().parse_args(argv), printed) == 0
    (row,) = orjson.loads((out / "summary.json").read_bytes())
    del row["sim_seconds"], row["sim_cpu_seconds"]
    return row, printed.getvalue()


def _no_plots(results: object, out_dir: Path) -> list[Path]:
    raise PlotsUnavailable


def test_kvgate_sim_gateways_hit_rate_falls_without_sharing_and_recovers_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim.replay.cli, "write_plots", _no_plots)  # the figures are the point
    trace = _family_trace(tmp_path / "family.jsonl")
    alone, _ = _kvgate_sim(trace, tmp_path / "alone")
    one, _ = _kvgate_sim(trace, tmp_path / "one", "--gateways", "1")
    assert one == alone
    unshared, printed = _kvgate_sim(trace, tmp_path / "unshared", "--gateways", "4", "--no-shared")
    assert "4 gateways, requests round-robin by request, sharing nothing" in printed
    shared, printed = _kvgate_sim(trace, tmp_path / "shared", "--gateways", "4")
    assert "reaches the others after 0.05 s" in printed
    hit = {name: row["hit_rate"] for name, row in (("1", alone), ("4u", unshared), ("4s", shared))}
    assert hit["4u"] < hit["1"] - 0.15  # type: ignore[operator]
    assert hit["4s"] > hit["1"] - 0.06  # type: ignore[operator]
    assert shared["ttft_mean_s"] < unshared["ttft_mean_s"]  # type: ignore[operator]


def test_kvgate_sim_refuses_contradictory_gateway_options(tmp_path: Path) -> None:
    trace = _family_trace(tmp_path / "family.jsonl")
    with pytest.raises(ValueError, match="contradict"):
        _kvgate_sim(trace, tmp_path / "x", "--gateways", "2", "--no-shared", "--sync-delay", "0")
    with pytest.raises(ValueError, match="gateways"):
        _kvgate_sim(trace, tmp_path / "x", "--gateways", "0")


@pytest.mark.parametrize("policy", ["prefix-aware", "estimated-ttft", "least-load"])
def test_gateways_sharing_at_once_with_one_rng_decide_as_one_gateway(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sharing replicates every piece of routing state: only the RNGs could tell them apart.
    build = sim.replay.gateways.build_routing_stack
    first: list[random.Random] = []

    def one_rng(
        section: RoutingSection, clock: Callable[[], float], rng: random.Random, **kw: Any
    ) -> RoutingStack:
        first.append(rng)
        return build(section, clock, first[0], **kw)

    trace = tenant_trace(250, seed=11, tenants=12, rate=25.0, outputs=(20, 200))
    alone = _replay(trace, policy)
    monkeypatch.setattr(sim.replay.gateways, "build_routing_stack", one_rng)
    together = _replay(trace, policy, gateways=4, sync_delay_s=0.0)
    assert _fingerprint(together) == _fingerprint(alone)
    first.clear()
    late = _replay(trace, policy, gateways=4, sync_delay_s=0.05)
    assert _fingerprint(late) != _fingerprint(alone)
