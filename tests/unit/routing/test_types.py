from __future__ import annotations

from types import MappingProxyType

import pytest

from routing import EndpointScores, ScoreTable


def _table() -> ScoreTable:
    return ScoreTable(["a", "b"], ["x", "y"], [[0.1, 0.2], [1.0, 0.0]], [2.1, 0.4])


def test_score_table_reads_as_the_tuple_of_rows_it_stands_for() -> None:
    table = _table()
    rows = (
        EndpointScores("a", MappingProxyType({"x": 0.1, "y": 1.0}), 2.1),
        EndpointScores("b", MappingProxyType({"x": 0.2, "y": 0.0}), 0.4),
    )
    assert len(table) == 2
    assert table == rows
    assert table == _table()
    assert table != rows[:1]
    assert tuple(table) == rows
    assert table[1] == rows[1]
    assert table[-1:] == rows[-1:]
    assert table[0] is table[0]  # built once
    assert [s.endpoint_id for s in table] == ["a", "b"]
    assert repr(table) == repr(rows)
    with pytest.raises(TypeError):
        hash(table)
    with pytest.raises(TypeError):
        table[0].scores["x"] = 0.5  # type: ignore[index]


def test_score_table_without_scorers_has_empty_score_maps() -> None:
    table = ScoreTable(["a"], [], [], [0.0])
    (row,) = table
    assert row == EndpointScores("a", MappingProxyType({}), 0.0)
