"""The other gateways' events applied to this gateway's index and TTFT model."""

from __future__ import annotations

from scoring.state.events import EventCounters, Eviction, Forget, Placement, TtftPoints, Withdrawal
from scoring.state.mirror import Mirror
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients

NOW_MS = 1_000_000.0


def now_ms() -> float:
    return NOW_MS


def _mirror(index: PrefixIndex, model: OnlineTtftModel | None = None) -> Mirror:
    return Mirror(
        "me",
        EventCounters(),
        index,
        lambda: 64,
        lambda b: b in {"b1", "b2"},
        ttft_model=model,
        clock_ms=now_ms,
    )


def test_a_placement_lands_in_the_index_when_it_means_something_here() -> None:
    index = PrefixIndex()
    m = _mirror(index)
    m.apply(Placement("other", "b1", 64, (1, 2, 3), now_ms()))
    assert index.match((1, 2, 3), ("b1", "b2")) == {"b1": 3, "b2": 0}
    m.apply(Placement("other", "b1", 32, (4,), 0))  # cut in another block size
    m.apply(Placement("other", "gone", 64, (5,), 0))  # not a backend here
    m.apply(Placement("me", "b2", 64, (1, 2, 3), 0))  # this gateway's own
    assert index.blocks("b1") == 3 and index.blocks("b2") == 0
    c = m.counters
    assert (c.received, c.applied, c.skipped) == (3, 1, 2)
    assert c.lag_ms_last is not None and 0 <= c.lag_ms_last < 10_000


def test_a_withdrawal_drops_what_the_failed_attempt_added() -> None:
    index = PrefixIndex()
    m = _mirror(index)
    index.record("b1", (1, 2))
    m.apply(Placement("other", "b1", 64, (1, 2, 3, 4), 0))
    m.apply(Withdrawal("other", "b1", 64, (1, 2, 3, 4), 2, 0))
    assert index.match((1, 2, 3, 4), ("b1",)) == {"b1": 2}


def test_an_eviction_evicts_the_oldest_entries_but_the_requests_own() -> None:
    index = PrefixIndex()
    m = _mirror(index)
    index.record("b1", (10,))
    index.record("b1", (20,))
    index.record("b1", (1, 2))
    m.apply(Eviction("other", "b1", 64, (1, 2), 2, 0))
    assert index.match((10,), ("b1",)) == {"b1": 0}
    assert index.match((20,), ("b1",)) == {"b1": 0}
    assert index.match((1, 2), ("b1",)) == {"b1": 2}


def test_a_forget_empties_the_backend_whatever_the_block_size() -> None:
    index = PrefixIndex()
    m = _mirror(index)
    index.record("b1", (1, 2))
    index.record("b2", (1, 2))
    m.apply(Forget("other", "b1", 0))
    assert index.match((1, 2), ("b1", "b2")) == {"b1": 0, "b2": 2}


def test_ttft_points_teach_the_model_the_other_gateways_lines() -> None:
    model = OnlineTtftModel(TtftCoefficients(0.01, 1e-4), min_samples=4)
    m = _mirror(PrefixIndex(), model)
    points = tuple(("b1", float(w), 0.02 + 2e-4 * w) for w in (0, 500, 1000, 2000, 4000))
    m.apply(TtftPoints("other", (*points, ("gone", 1.0, 9.0)), 0))
    line = model.coefficients("b1")
    assert abs(line.prefill_token_s - 2e-4) < 1e-9 and abs(line.overhead_s - 0.02) < 1e-9
    assert m.counters.applied == 1


def test_ttft_points_are_skipped_without_a_model() -> None:
    m = _mirror(PrefixIndex())
    m.apply(TtftPoints("other", (("b1", 1.0, 0.1),), 0))
    assert m.counters.skipped == 1


def test_hashes_of_another_size_make_the_gateway_look_at_its_block_size_again() -> None:
    index, size = PrefixIndex(), {"now": 64}
    m = Mirror(
        "me",
        EventCounters(),
        index,
        lambda: 64,
        lambda b: True,
        refresh_block_chars=lambda: size["now"],
    )
    m.apply(Placement("other", "b1", 128, (1, 2), 0))  # still 64 here
    assert index.blocks("b1") == 0
    size["now"] = 128  # the engines' metrics say so: this gateway had not routed yet
    m.apply(Placement("other", "b1", 128, (1, 2), 0))
    assert index.blocks("b1") == 2


def test_a_live_placement_is_handed_on_as_a_remote_dispatch() -> None:
    seen: list[tuple[str, float, int | None]] = []
    m = Mirror(
        "me",
        EventCounters(),
        PrefixIndex(),
        lambda: 64,
        lambda b: b == "b1",
        remote_dispatch=lambda backend, at_ms, tokens: seen.append((backend, at_ms, tokens)),
    )
    m.apply(Placement("other", "b1", 64, (1, 2), 123.0, 700))
    m.apply(Placement("old", "b1", 64, (1, 2), 124.0))  # a peer that does not send tokens
    m.apply(Placement("other", "b1", 64, (3,), 456.0, 5), live=False)  # history: long settled
    m.apply(Placement("other", "gone", 64, (4,), 789.0, 5))  # not a backend here
    m.apply(Placement("me", "b1", 64, (5,), 1.0, 5))  # its own
    assert seen == [("b1", 123.0, 700), ("b1", 124.0, None)]


def test_a_placement_without_hashes_is_a_dispatch_all_the_same() -> None:
    seen: list[tuple[str, float, int | None]] = []
    index = PrefixIndex()
    m = Mirror(
        "me",
        EventCounters(),
        index,
        lambda: 64,
        lambda b: b == "b1",
        remote_dispatch=lambda backend, at_ms, tokens: seen.append((backend, at_ms, tokens)),
    )
    m.apply(Placement("other", "b1", 64, (), 123.0, 9))  # a prompt shorter than a block
    m.apply(Withdrawal("other", "b1", 64, (), 0, 124.0))  # nothing to take back
    assert seen == [("b1", 123.0, 9)]
    assert index.blocks("b1") == 0
    c = m.counters
    assert (c.received, c.applied, c.skipped) == (2, 1, 1)


def test_without_a_block_size_hashes_of_any_size_are_taken() -> None:
    index = PrefixIndex()
    m = Mirror("me", EventCounters(), index, None, lambda b: True)  # the simulator's
    m.apply(Placement("other", "b1", 64, (1, 2), 0))
    m.apply(Placement("other", "b1", 2048, (3,), 0))
    assert index.blocks("b1") == 3
