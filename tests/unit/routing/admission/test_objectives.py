"""Objectives: lookup by name (config overlaid by the cluster) and priority → band."""

from __future__ import annotations

from routing.admission.objectives import Objectives, band_of


def test_a_known_objective_gives_its_priority_an_unknown_one_none() -> None:
    table = Objectives({"premium": 1, "batch": -1})
    assert table.priority("premium") == 1
    assert table.priority("batch") == -1
    assert table.priority("other") is None
    assert table.priority(None) is None
    assert len(table) == 2


def test_the_cluster_objectives_overlay_the_configured_ones_and_are_replaced_whole() -> None:
    table = Objectives({"premium": 1, "batch": -1})
    table.watched({"batch": 5, "canary": -3})
    assert (table.priority("premium"), table.priority("batch"), table.priority("canary")) == (
        1,
        5,
        -3,
    )
    table.watched({})
    assert table.priority("batch") == -1 and table.priority("canary") is None


def test_priority_above_zero_is_the_first_band_zero_the_default_below_zero_the_last() -> None:
    assert band_of(1, 3, 1) == 0
    assert band_of(1000, 3, 1) == 0
    assert band_of(0, 3, 1) == 1
    assert band_of(-1, 3, 1) == 2
    assert band_of(-7, 5, 2) == 4
    assert band_of(-1, 1, 0) == 0  # one band: everything in it
