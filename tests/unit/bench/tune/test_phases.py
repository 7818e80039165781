from __future__ import annotations

from pathlib import Path

from bench.regime.grid import FleetSpec
from bench.tune.phases import Phase, phase_chats, requests, scaled, trace, write_trace
from routing.traces import load_trace

PHASES = [Phase("a", 0.25, "uniform", 4.0, 10.0), Phase("b", 2.0, "hot", 8.0, 10.0, 1024)]


def test_phases_follow_each_other_with_their_own_tenants() -> None:
    chats, arrivals, spans = phase_chats(PHASES, FleetSpec(), seed=1)
    assert spans == [("a", 0.0, 10.0), ("b", 10.0, 20.0)]
    assert all(
        t[0] < 10.0 for c, t in zip(chats, arrivals, strict=True) if c.id.startswith("chat-100-")
    )
    assert any(t[0] >= 10.0 for t in arrivals)
    firsts = {c.system_prompt[:50] for c in chats}
    assert len(firsts) > 2
    live, simulated = requests(PHASES, FleetSpec(), 1), trace(PHASES, FleetSpec(), 1)
    assert len(live) == len(simulated) and [r.at_s for r in live] == sorted(r.at_s for r in live)
    assert scaled(PHASES, 5.0, 2.0)[1] == Phase("b", 2.0, "hot", 16.0, 5.0, 1024)


def test_the_run_as_a_recording(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "phases.jsonl", PHASES, FleetSpec(), 1)
    loaded = load_trace(path)
    assert [r.input_tokens for r in loaded] == [
        r.input_tokens for r in trace(PHASES, FleetSpec(), 1)
    ]
