"""`KVGATE_*` variables for the flags of `kvgate serve` and `kvgate epp`."""

from __future__ import annotations

import argparse

import pytest

from kvgate.cli import build_parser
from kvgate.cli.effective import effective_config
from kvgate.cli.env import env_name


def _parse(environ: dict[str, str], *argv: str) -> argparse.Namespace:
    return build_parser(environ).parse_args(list(argv))


def _actions(command: str) -> list[argparse.Action]:
    parser = build_parser({})
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [a for a in sub.choices[command]._actions if a.option_strings != ["-h", "--help"]]


def test_env_names_come_from_the_flags() -> None:
    assert env_name("--port") == "KVGATE_PORT"
    assert env_name("--admin-port") == "KVGATE_ADMIN_PORT"


@pytest.mark.parametrize("command", ["serve", "epp"])
def test_every_flag_has_a_variable_named_in_its_help(command: str) -> None:
    actions = _actions(command)
    assert len(actions) >= 10
    for action in actions:
        assert action.help is not None
        first_long = next(o for o in action.option_strings if o.startswith("--"))
        assert action.help.endswith(f"[env {env_name(first_long)}]")  # aliases share it


def test_variables_fill_in_flags_and_reach_the_config() -> None:
    environ = {
        "KVGATE_PORT": "9123",
        "KVGATE_HOST": "0.0.0.0",
        "KVGATE_POLICY": "session",
        "KVGATE_ADMIN_PORT": "9124",
        "KVGATE_LOG_LEVEL": "debug",
        "KVGATE_LOG_FORMAT": "json",
        "KVGATE_WATCH_CONFIG": "2.5",
    }
    args = _parse(environ, "serve", "--backend", "http://a:1")
    assert (args.log_level, args.log_format, args.watch_config) == ("debug", "json", 2.5)
    cfg = effective_config(args)
    assert (cfg.server.host, cfg.server.port, cfg.server.admin_port) == ("0.0.0.0", 9123, 9124)
    assert cfg.routing.policy == "session"


def test_a_flag_wins_over_its_variable() -> None:
    environ = {"KVGATE_PORT": "9123", "KVGATE_BACKEND": "http://env:1", "KVGATE_LOG_LEVEL": "error"}
    args = _parse(environ, "serve", "--port", "0", "--backend", "http://flag:1")
    assert args.port == 0 and args.backend == ["http://flag:1"] and args.log_level == "error"


def test_unset_and_empty_variables_leave_the_defaults() -> None:
    args = _parse({"KVGATE_PORT": "", "KVGATE_POLICY": "  "}, "serve", "--backend", "http://a:1")
    assert args.port is None and args.policy is None  # the config file's then
    assert (args.log_level, args.log_format, args.watch_config) == ("info", "text", None)
    epp = _parse({}, "epp", "--backend", "http://a:1")
    assert (epp.grpc_port, epp.health_port, epp.metrics_port) == (9002, 9003, 9090)


def test_epp_ports_from_variables() -> None:
    args = _parse({"KVGATE_GRPC_PORT": "7002", "KVGATE_METRICS_PORT": "0"}, "epp")
    assert (args.grpc_port, args.health_port, args.metrics_port) == (7002, 9003, 0)


@pytest.mark.parametrize(
    ("value", "urls"),
    [
        ("http://a:1 http://b:2", ["http://a:1", "http://b:2"]),
        ("http://a:1,http://b:2", ["http://a:1", "http://b:2"]),
        (
            "http://a:1,engine=sglang,models=x|y,http://b:2,id=bee",
            ["http://a:1,engine=sglang,models=x|y", "http://b:2,id=bee"],
        ),
        (" https://a:1\n  http://b:2,kv_events=tcp://b:5557 ", None),
    ],
)
def test_backend_variable_lists_backends(value: str, urls: list[str] | None) -> None:
    args = _parse({"KVGATE_BACKEND": value}, "serve")
    if urls is not None:
        assert args.backend == urls
    cfg = effective_config(args)
    assert len(cfg.backends) == 2
    if urls is None:
        assert cfg.backends[1].kv_events is not None  # kv_events=tcp:// is not a new backend


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"KVGATE_PORT": "eighty"}, "KVGATE_PORT='eighty'"),
        ({"KVGATE_LOG_LEVEL": "loud"}, "KVGATE_LOG_LEVEL='loud': expected one of debug, info"),
        ({"KVGATE_LOG_FORMAT": "xml"}, "KVGATE_LOG_FORMAT='xml': expected one of text, json"),
    ],
)
def test_a_bad_variable_fails_like_a_bad_flag(
    environ: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _parse(environ, "serve", "--backend", "http://a:1")
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_other_commands_ignore_the_variables() -> None:
    args = _parse({"KVGATE_PORT": "eighty"}, "emulate")
    assert args.port == 8001
