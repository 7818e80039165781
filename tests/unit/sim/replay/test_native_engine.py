"""The compiled KV cache changes nothing in a replay: request by request, bit for bit.

Each case replays a slice of the Mooncake conversation trace (`tests/fixtures/mooncake`)
through the gateway's routing onto engines with the compiled cache and onto engines with
the pure-Python reference, and compares their fingerprints (`equivalence.py`): every
request's replica and decision, first-token and last-token times as exact floats, every
engine's counters, free queue, cached hashes and KV events. Both must also equal the
digest recorded from the engine as it was before the compiled cache existed (commit
64c83ec), so a change that moved both alike would show too. Under cache pressure (fewer
blocks, fewer replicas) requests are preempted and prefixes evicted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sim.replay import SimSettings, cli
from tests.unit.sim.replay.equivalence import digest, fingerprint, h100, mooncake_slice

# (requests, policy, KV blocks per replica or None for the profile's, replicas) → digest
SMALL = {
    (300, "prefix-aware", 9000, 2): "3e0d1201cf2044ad",
    (150, "precise-prefix", 9000, 2): "11b14bea70e3cb07",
    (300, "oracle", 9000, 2): "90fac94eeff5854f",
}
FULL = {
    (1500, "round-robin", None, 8): "3b3698b2e9d7817b",
    (1500, "prefix-aware", None, 8): "24eba4fa68596523",
    (1500, "round-robin", 12000, 2): "8d98b28412c356b8",
    (1500, "precise-prefix", 12000, 2): "79c84b6c5a24a40b",
    (1500, "oracle", 9000, 3): "ba35f1b22c2d4c0f",
}


def _check(tmp_path: Path, case: tuple[int, str, int | None, int], golden: str) -> None:
    requests, policy, blocks, replicas = case
    trace = mooncake_slice(tmp_path, requests)
    profile = h100(trace, blocks)
    prints = [
        fingerprint(trace, policy, profile, SimSettings(replicas=replicas, native=native))
        for native in (False, True)
    ]
    reference, compiled = prints
    assert len(reference["requests"]) == requests  # type: ignore[arg-type]
    assert compiled == reference
    assert digest(reference) == golden
    if blocks is not None:  # under pressure: requests were preempted
        assert sum(e["stats"][2] for e in reference["engines"]) > 50  # type: ignore[attr-defined,index]


@pytest.mark.parametrize("case", list(SMALL))
def test_a_slice_replays_identically_on_the_compiled_cache(
    tmp_path: Path, case: tuple[int, str, int | None, int]
) -> None:
    _check(tmp_path, case, SMALL[case])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(FULL))
def test_the_1500_request_slice_replays_identically(
    tmp_path: Path, case: tuple[int, str, int | None, int]
) -> None:
    _check(tmp_path, case, FULL[case])


@pytest.mark.parametrize("built", [False, True])
def test_sim_says_when_the_pure_python_engine_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built: bool
) -> None:
    mooncake_slice(tmp_path, 1)
    args = argparse.Namespace(
        format="auto",
        profile="h100-llama3-8b",
        trace=tmp_path / "conversation_1500.jsonl",
        limit=5,
        block_size=None,
    )
    monkeypatch.setattr(cli, "NATIVE_BUILT", built)
    _, _, notes = cli.load_inputs(args)
    assert (cli.PURE_PYTHON_NOTE in notes) is not built
