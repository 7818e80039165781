from __future__ import annotations

import pytest

from kvgate.cli.listen import ListenError, check_admin_port
from routing.config.schema import GatewayConfig


def test_admin_port_equal_to_the_api_port_is_refused() -> None:
    cfg = GatewayConfig.model_validate({"server": {"port": 8123, "admin_port": 8123}})
    with pytest.raises(ListenError, match=r"admin_port 8123 is server\.port"):
        check_admin_port(cfg)


def test_no_admin_port_is_nothing_to_check() -> None:
    check_admin_port(GatewayConfig())  # no admin listener: nothing is bound
