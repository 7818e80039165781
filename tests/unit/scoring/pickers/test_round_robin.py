from __future__ import annotations

from scoring.pickers.round_robin import RoundRobinPicker
from tests.unit.scoring.helpers import context, request, scored


def test_ranks_by_id_and_rotates_once_per_pick() -> None:
    picker = RoundRobinPicker("rr")
    candidates = scored({"c": 0.9, "a": 0.1, "b": 0.5})
    ctx = context()
    picks = [list(picker.pick(request(), candidates, ctx)) for _ in range(4)]
    assert picks == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


def test_each_endpoint_is_target_equally_often_whatever_the_scores() -> None:
    picker = RoundRobinPicker("rr")
    candidates = scored({"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0})
    targets = [picker.pick(request(), candidates, context())[0] for _ in range(400)]
    assert {t: targets.count(t) for t in "abcd"} == {"a": 100, "b": 100, "c": 100, "d": 100}


def test_ranking_ignores_input_order() -> None:
    first, second = RoundRobinPicker("rr"), RoundRobinPicker("rr")
    forward = scored({"a": 0.0, "b": 0.0, "c": 0.0})
    backward = list(reversed(forward))
    for _ in range(3):
        assert first.pick(request(), forward, context()) == second.pick(
            request(), backward, context()
        )


def test_instances_keep_separate_counters() -> None:
    one, two = RoundRobinPicker("one"), RoundRobinPicker("two")
    candidates = scored({"a": 0.0, "b": 0.0})
    one.pick(request(), candidates, context())
    assert two.pick(request(), candidates, context())[0] == "a"
    assert one.pick(request(), candidates, context())[0] == "b"


def test_counter_applies_to_a_changed_candidate_set() -> None:
    picker = RoundRobinPicker("rr")
    picker.pick(request(), scored({"a": 0.0, "b": 0.0}), context())
    assert list(picker.pick(request(), scored({"a": 0.0, "b": 0.0, "c": 0.0}), context())) == [
        "b",
        "c",
        "a",
    ]


def test_single_and_empty() -> None:
    picker = RoundRobinPicker("rr")
    assert list(picker.pick(request(), scored({"only": 0.3}), context())) == ["only"]
    assert list(picker.pick(request(), [], context())) == []
