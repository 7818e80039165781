"""The local map of stored responses to their backends: bounded LRU, entries expiring."""

from __future__ import annotations

import pytest

from gateway.responses.owners import ResponseOwners


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_id_names_its_backend_until_it_expires() -> None:
    clock = Clock()
    owners = ResponseOwners(10, 60.0, clock)
    owners.put("resp_a", "b1")
    clock.now = 59.9
    assert owners.get("resp_a") == "b1"  # reading does not extend its life
    clock.now = 60.0
    assert owners.get("resp_a") is None
    assert len(owners) == 0  # an expired entry is dropped when met


def test_writing_again_renews_and_moves_an_id() -> None:
    clock = Clock()
    owners = ResponseOwners(10, 60.0, clock)
    owners.put("resp_a", "b1")
    clock.now = 50.0
    owners.put("resp_a", "b2")
    clock.now = 100.0
    assert owners.get("resp_a") == "b2"
    owners.put("resp_b", "b1", ttl_s=5.0)
    clock.now = 105.0
    assert owners.get("resp_b") is None


def test_the_least_recently_used_id_goes_first() -> None:
    owners = ResponseOwners(2, 60.0, Clock())
    owners.put("resp_a", "b1")
    owners.put("resp_b", "b2")
    assert owners.get("resp_a") == "b1"  # used: b is now the oldest
    owners.put("resp_c", "b3")
    assert (owners.get("resp_a"), owners.get("resp_b"), owners.get("resp_c")) == ("b1", None, "b3")
    assert len(owners) == 2


def test_a_deleted_id_is_forgotten() -> None:
    owners = ResponseOwners(2, 60.0, Clock())
    owners.put("resp_a", "b1")
    owners.discard("resp_a")
    owners.discard("resp_never")
    assert owners.get("resp_a") is None


@pytest.mark.parametrize(("entries", "ttl"), [(0, 1.0), (1, 0.0)])
def test_bounds_must_be_positive(entries: int, ttl: float) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        ResponseOwners(entries, ttl, Clock())
