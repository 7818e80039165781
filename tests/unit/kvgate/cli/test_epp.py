from __future__ import annotations

from collections.abc import Callable

import pytest

from kvgate.cli import build_parser, main


def test_epp_help_shows_the_reference_ports(help_text: Callable[..., str]) -> None:
    out = help_text("epp")
    for flag, port in (("--grpc-port", 9002), ("--health-port", 9003), ("--metrics-port", 9090)):
        assert flag in out and f"(default {port})" in out
    assert "x-gateway-destination-endpoint" in out


def test_one_endpoint_per_answer_unless_asked(help_text: Callable[..., str]) -> None:
    out = help_text("epp")
    assert "--max-endpoints N" in out and "(default 1)" in out
    assert "override_host" in out


def test_max_endpoints_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["epp", "--backend", "http://10.0.0.1:8000", "--max-endpoints", "0"]) == 2
    assert "--max-endpoints: 0" in capsys.readouterr().err


def test_the_reference_pickers_flag_names_are_accepted() -> None:
    args = build_parser({}).parse_args(
        ["epp", "--pool-name", "llm", "--pool-namespace", "ml", "--grpc-health-port", "9500"]
    )
    assert (args.pool, args.namespace, args.health_port) == ("llm", "ml", 9500)
    serve = build_parser({}).parse_args(["serve", "--pool", "llm"])
    assert serve.pool == "llm"
