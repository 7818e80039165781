"""`python -m bench shared-state-fleet`: its cells, its setups, its simulated runs."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import pytest

from bench import shared_state_fleet as ssf


def test_closed_and_open_cells_are_known_by_name() -> None:
    closed, open_ = ssf._cells("p1.5-hot-closed16,p0.25-zipf-open50")
    assert (closed.loop, closed.clients) == ("closed", 16)
    assert (open_.loop, open_.load, open_.pressure) == ("open", 0.5, 0.25)
    with pytest.raises(SystemExit, match="no cell"):
        ssf._cells("p9-zipf-open50")


@pytest.mark.parametrize(
    ("setup", "gateways", "redis", "front"),
    [("one", 1, False, None), ("redis", 4, True, None), ("control", 4, True, 0)],
)
def test_the_control_setup_runs_every_gateway_but_sends_to_the_first(
    monkeypatch: pytest.MonkeyPatch, setup: str, gateways: int, redis: bool, front: int | None
) -> None:
    seen: dict[str, Any] = {}

    async def fake_run(cell: object, spec: object, policy: str, **kw: Any) -> dict[str, Any]:
        seen.update(kw)
        return {"hit_rate": 0.5}

    monkeypatch.setattr(ssf, "run", fake_run)
    args = argparse.Namespace(
        gateways=4, replicas=4, outage_at=5.0, outage_for=5.0, slowdown=1.0, spread="client"
    )
    [cell] = ssf._cells("p1.5-hot-closed16")
    row = asyncio.run(ssf._one(setup, cell, 1, args, Path(".")))
    assert row["setup"] == setup
    assert (seen["gateways"], seen["redis"], seen["front"]) == (gateways, redis, front)


def test_an_open_loop_cell_is_simulated_with_and_without_sharing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = argparse.Namespace(
        gateways=2,
        replicas=2,
        spread="client",
        sim_delays="0.001",
        cells="p0.25-zipf-open50",
        seeds="1",
    )
    assert ssf.simulate(args) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "open50" in line]
    assert [r.split("|")[3].strip() for r in rows] == ["one", "shared, 1 ms", "nothing shared"]
    for r in rows:
        hit = float(r.split("|")[4].strip().rstrip("%"))
        assert 0 < hit <= 100


def test_a_run_tells_each_gateways_sharing_lags() -> None:
    from bench.precise.run import sharing_lags

    assert sharing_lags({}) is None
    assert sharing_lags({"shared": [{"backend": "memory"}]}) is None  # one gateway, nothing
    lag = {"n": 3, "p50": 1.25, "p90": 4.0, "p99": 6.5, "max": 6.5}
    empty = {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}
    state = {
        "shared": [
            {"channel": "redis", "events": {"lag_ms": lag}, "load": {"lag_ms": empty}},
            {"channel": "redis", "events": {"lag_ms": empty}, "load": None},
        ]
    }
    sharing = sharing_lags(state)
    assert sharing == {"events_lag_ms": [lag, empty], "load_lag_ms": [empty, None]}
    line = ssf.lag_line(sharing)
    assert line == "lag p50/p99 ms per gateway: events 1.2/6.5 —; load reports — —"
    assert ssf.lag_line(None) == ""


def test_every_run_is_divided_by_one_gateways_mean_in_its_seed() -> None:
    def row(setup: str, seed: int, hit: float, ttft: float) -> dict[str, Any]:
        return {
            "setup": setup,
            "cell": "c",
            "seed": seed,
            "hit_rate": hit,
            "ttft_mean_s": ttft,
            "ttft_p90_s": ttft * 2,
            "errors": 0,
        }

    rows = [
        row("one", 1, 0.8, 0.10),
        row("one", 1, 0.9, 0.30),  # a second jitter of seed 1
        row("one", 2, 0.5, 1.0),
        row("redis", 1, 0.85, 0.22),
        row("redis", 2, 0.5, 1.1),
    ]
    means = ssf.one_gateway_means(rows)
    assert means[("c", 2)] == (0.5, 1.0)
    assert means[("c", 1)][0] == pytest.approx(0.85)
    assert means[("c", 1)][1] == pytest.approx(0.2)
    lines = ssf.table(rows).splitlines()
    one = next(line for line in lines if "| one |" in line)
    redis = next(line for line in lines if "| redis |" in line)
    # One gateway's own runs against their mean: 0.5 and 1.5 in seed 1, 1.0 in seed 2.
    assert "| 1.00 ± 0.29 (0.50–1.50) |" in one
    assert "| 1.10 ± 0.00 (1.10–1.10) |" in redis
    assert "| 1.000 (1.000–1.000) |" in redis  # hit rate 0.85 ÷ 0.85, 0.5 ÷ 0.5
