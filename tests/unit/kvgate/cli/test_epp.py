"""`kvgate epp`'s command line: the reference ports, TLS flags, --redis."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from kvgate.cli import build_parser, main
from routing.config.schema import ConfigError


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


def test_secure_serving_is_on_by_default_and_spelled_as_go_flags_are() -> None:
    from kvgate.cli import build_parser

    def parse(*argv: str) -> argparse.Namespace:
        return build_parser({}).parse_args(["epp", *argv])

    assert parse().secure_serving is True and parse().cert_path is None
    assert parse("--secure-serving").secure_serving is True
    assert parse("--secure-serving=false").secure_serving is False
    assert parse("--secure-serving", "0").secure_serving is False
    assert parse("--cert-path", "/tls").cert_path == "/tls"
    env = build_parser({"KVGATE_SECURE_SERVING": "False"}).parse_args(["epp"])
    assert env.secure_serving is False
    with pytest.raises(SystemExit):
        parse("--secure-serving=maybe")


def test_a_cert_path_without_tls_is_refused() -> None:
    from kvgate.cli import build_parser
    from kvgate.cli.epp import run

    args = build_parser({}).parse_args(["epp", "--secure-serving=false", "--cert-path", "/x"])
    with pytest.raises(ConfigError, match="--cert-path"):
        run(args)


def test_epp_takes_redis(help_text: Callable[..., str]) -> None:
    from kvgate.cli import build_parser
    from kvgate.cli.effective import effective_config

    args = build_parser({}).parse_args(["epp", "--redis", "redis://127.0.0.1:1/0"])
    state = effective_config(args).state
    assert (state.backend, state.url) == ("redis", "redis://127.0.0.1:1/0")
    assert "--redis" in help_text("epp")
