"""`kvgate serve`'s tuner beside it (`kvgate.cli.tune.beside_gateway`): started on the
gateway's config file and recording, or not at all with the reason in a warning."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

import pytest

from kvgate.cli.tune import beside_gateway
from routing.config.schema import parse_config

DIGEST = "0" * 64


def _args(**over: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"config": "kvgate.yaml", "log_level": "info", **over})


def _cfg(tuning: dict[str, Any], **sections: Any) -> Any:
    raw = {"server": {"record_path": "/tmp/rec.jsonl"}, "tuning": tuning, **sections}
    return parse_config(raw)


def test_tuning_on_starts_the_tuner_on_the_same_file_and_recording() -> None:
    child = beside_gateway(_args(), _cfg({"mode": "shadow"}))
    assert child is not None
    assert list(child.arguments) == [
        "--config", "kvgate.yaml", "--record", "/tmp/rec.jsonl",
        "--parent", str(os.getpid()), "--log-level", "info",
    ]  # fmt: skip
    shared = _cfg({"mode": "apply"}, state={"backend": "redis", "url": "redis://r:6379/0"})
    child = beside_gateway(_args(), shared)
    assert child is not None and list(child.arguments[-2:]) == ["--redis", "redis://r:6379/0"]


def test_off_or_spawn_false_starts_nothing_silently(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert beside_gateway(_args(), _cfg({"mode": "off"})) is None
        assert beside_gateway(_args(), _cfg({"mode": "apply", "spawn": False})) is None
    assert caplog.records == []


@pytest.mark.parametrize(
    ("args", "sections", "reason"),
    [
        ({"config": None}, {}, "no config file"),
        ({}, {"server": {}}, "no recording to replay"),
        ({"workers": 2}, {}, "--workers > 1"),
        ({}, {"server": {"record_path": "r", "tls_cert_file": "c", "tls_key_file": "k"}}, "TLS"),
        ({}, {"security": {"admin_key_sha256": DIGEST}}, "KVGATE_ADMIN_KEY"),
    ],
)
def test_a_tuner_that_could_not_work_is_not_started(
    args: dict[str, Any],
    sections: dict[str, Any],
    reason: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KVGATE_ADMIN_KEY", raising=False)
    with caplog.at_level(logging.WARNING):
        assert beside_gateway(_args(**args), _cfg({"mode": "shadow"}, **sections)) is None
    [record] = caplog.records
    assert "the tuner is not started" in record.getMessage() and reason in record.getMessage()
    monkeypatch.setenv("KVGATE_ADMIN_KEY", "k")  # with the key itself, the digest will do
    keyed = _cfg({"mode": "shadow"}, security={"admin_key_sha256": DIGEST})
    assert beside_gateway(_args(), keyed) is not None
