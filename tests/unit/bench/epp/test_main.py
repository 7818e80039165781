"""The EPP bench's command line and the hop's round order."""

from __future__ import annotations

from pathlib import Path

from bench.epp.__main__ import parse_args
from bench.epp.hop import TARGETS, rotated


def test_defaults_measure_the_hop_at_200_per_second_in_three_rounds() -> None:
    s = parse_args([])
    assert (s.hop_rate, s.rounds, s.duration_s) == (200.0, 3, 6.0)
    assert (s.conversations, s.replicas, s.policy) == (48, 4, "prefix-aware")
    assert s.body_mode == "BUFFERED" and s.out == Path("out/bench/epp")


def test_quick_shortens_both_parts() -> None:
    s = parse_args(["--quick", "--out", "x", "--body-mode", "FULL_DUPLEX_STREAMED"])
    assert (s.conversations, s.rounds, s.duration_s) == (16, 1, 3.0)
    assert s.out == Path("x") and s.body_mode == "FULL_DUPLEX_STREAMED"


def test_each_round_starts_with_the_next_target() -> None:
    assert rotated(TARGETS, 0) == TARGETS
    assert rotated(TARGETS, 1) == (*TARGETS[1:], TARGETS[0])
    assert rotated(TARGETS, len(TARGETS)) == TARGETS


def test_the_envoy_template_is_chosen_on_the_command_line() -> None:
    assert parse_args([]).envoy_config == "envoy.yaml"
    assert parse_args(["--envoy-config", "envoy-original-dst.yaml"]).envoy_config == (
        "envoy-original-dst.yaml"
    )
