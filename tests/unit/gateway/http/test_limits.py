"""The connection cap derived from the file-descriptor limit, and the limits from config."""

from __future__ import annotations

import resource

import pytest

from gateway.http.limits import FD_RESERVE, MIN_CONNECTIONS, ServerLimits, connection_cap
from routing.config.schema import ServerSection, UpstreamSection


@pytest.mark.parametrize(
    ("nofile", "upstream", "cap"),
    [
        (1024, 1024, 384),  # the usual soft limit: (1024 - 256) / 2, half for engines
        (65536, 1024, 65536 - FD_RESERVE - 1024),  # all but the upstream cap
        (4096, 64, 4096 - FD_RESERVE - 64),
        (256, 1024, 96),  # a quarter kept when 256 would be most of them
        (40, 1024, MIN_CONNECTIONS),
    ],
)
def test_connection_cap_leaves_room_for_upstream_and_files(
    nofile: int, upstream: int, cap: int
) -> None:
    assert connection_cap(upstream, nofile) == cap
    # Clients, their upstream connections and the reserve fit in the limit.
    if cap > MIN_CONNECTIONS:
        assert cap + min(cap, upstream) + min(FD_RESERVE, nofile // 4) <= nofile


def test_an_unlimited_descriptor_limit_counts_as_a_large_one() -> None:
    assert connection_cap(1024, resource.RLIM_INFINITY) == connection_cap(1024, 1 << 20)


def test_the_process_limit_is_read_when_none_is_given() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert connection_cap(1024) == connection_cap(1024, soft)


def test_an_unset_max_connections_is_derived_a_set_one_kept() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    upstream = UpstreamSection(max_connections=100)
    derived = ServerLimits.from_config(ServerSection(), upstream)
    assert derived.max_connections == connection_cap(100, soft)
    fixed = ServerLimits.from_config(ServerSection(max_connections=10), upstream)
    assert fixed.max_connections == 10
