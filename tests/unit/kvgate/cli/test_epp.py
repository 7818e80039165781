from __future__ import annotations

from collections.abc import Callable


def test_epp_help_shows_the_reference_ports(help_text: Callable[..., str]) -> None:
    out = help_text("epp")
    for flag, port in (("--grpc-port", 9002), ("--health-port", 9003), ("--metrics-port", 9090)):
        assert flag in out and f"(default {port})" in out
    assert "x-gateway-destination-endpoint" in out
