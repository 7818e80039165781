"""`python -m bench regime`'s command line (nothing is run)."""

from __future__ import annotations

import pytest

from bench import __main__ as bench_main
from bench.regime.__main__ import grid, parse


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_main.main(["regime", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for option in ("--quick", "--mode", "--routers", "--out", "--pressures", "--slowdown"):
        assert option in out


def test_bench_lists_regime(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main.main(["--help"]) == 0
    assert "regime" in capsys.readouterr().out


def test_axes_from_the_command_line() -> None:
    assert [c.name for c in grid(parse(["--quick"]))] == [
        "p1.5-hot-closed16",
        "p0.25-uniform-closed16",
    ]
    args = parse(["--pressures", "1,2", "--popularities", "zipf", "--loads", "0.3"])
    assert [c.name for c in grid(args)] == [
        "p1-zipf-closed16",
        "p2-zipf-closed16",
        "p1-hot-open30",
        "p2-hot-open30",
    ]
    assert parse([]).mode == "both" and parse([]).out == "out/bench/regime"


def test_repeats_are_positive() -> None:
    assert parse([]).repeats == 1 and parse(["--repeats", "3"]).repeats == 3
    with pytest.raises(SystemExit):
        parse(["--repeats", "0"])
