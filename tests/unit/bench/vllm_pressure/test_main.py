"""`python -m bench vllm-pressure`'s command line (nothing is run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as bench_main
from bench.vllm_pressure.__main__ import ROUTERS, cells, parse, rotated, settings_json

KV = 2 * 96 * 32


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_main.main(["vllm-pressure", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for option in ("--quick", "--routers", "--repeats", "--out", "--restart", "--num-blocks"):
        assert option in out


def test_bench_lists_vllm_pressure(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main.main(["--help"]) == 0
    assert "vllm-pressure" in capsys.readouterr().out


def test_defaults() -> None:
    args = parse([])
    assert args.routers == [tuple(r.split(":")) for r in ROUTERS]
    assert (args.repeats, args.replicas, args.num_blocks) == (1, 2, 96)
    assert args.out == Path("out/bench/vllm-pressure") and not args.restart
    assert cells(args)[0].name(KV) == "p1.5-hot-closed6"
    assert len(cells(args)) == 3 and len(cells(parse(["--quick"]))) == 1


def test_routers_repeats_and_chats_from_the_command_line() -> None:
    args = parse(["--routers", "kvgate:prefix-aware,vllm-router:cache_aware", "--repeats", "3"])
    assert args.routers == [("kvgate", "prefix-aware"), ("vllm-router", "cache_aware")]
    assert args.repeats == 3
    assert {c.conversations for c in cells(parse(["--conversations", "12"]))} == {12}
    assert settings_json(args)["routers"] == ["kvgate:prefix-aware", "vllm-router:cache_aware"]
    assert settings_json(args)["out"] == "out/bench/vllm-pressure"


@pytest.mark.parametrize("argv", [["--routers", "kvgate"], ["--routers", ":x"], ["--repeats", "0"]])
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


def test_each_router_goes_first_in_turn() -> None:
    routers = [("a", "1"), ("b", "2"), ("c", "3")]
    assert [r[0] for r in rotated(routers, 0)] == ["a", "b", "c"]
    assert [r[0] for r in rotated(routers, 1)] == ["b", "c", "a"]
    assert [r[0] for r in rotated(routers, 5)] == ["c", "a", "b"]
