"""Two workers' meshes wired to each other by a stand-in channel (no sockets)."""

from __future__ import annotations

from gateway.state.load import LoadSharing
from gateway.state.local import LocalMesh
from gateway.state.outbox import Outbox
from scoring.state.events import EventCounters, Placement
from scoring.state.mirror import Mirror
from scoring.state.prefix_index import PrefixIndex


class _Wire:
    """Delivers what one mesh broadcasts straight to the other's `receive`."""

    def __init__(self) -> None:
        self.peer: LocalMesh | None = None
        self.frames = 0

    async def connect(self) -> None:
        return None

    def broadcast(self, payload: bytes) -> None:
        self.frames += 1
        if self.peer is not None:
            self.peer.receive(payload)


def _mesh(name: str, counts: dict[str, tuple[int, int]]) -> tuple[LocalMesh, _Wire, PrefixIndex]:
    counters, index, wire = EventCounters(), PrefixIndex(), _Wire()
    mirror = Mirror(name, counters, index, lambda: 64, lambda b: True)
    load = LoadSharing(name, lambda: counts)
    return LocalMesh(wire, Outbox(name, counters), mirror, load), wire, index


def test_a_workers_events_and_load_reach_its_sibling_in_one_frame() -> None:
    a, wire_a, _ = _mesh("w0", {"b1": (2, 500)})
    b, wire_b, index_b = _mesh("w1", {})
    wire_a.peer, wire_b.peer = b, a
    for i in range(3):
        a._outbox.put(Placement("w0", "b1", 64, (i, i + 100), 0))
    a.flush()
    assert wire_a.frames == 1
    assert index_b.match((1, 101), ("b1",)) == {"b1": 2}
    assert b._mirror.counters.applied == 3
    assert b._load is not None and b._load.remote == {"b1": (2, 500)}
    a.flush()  # nothing new: no frame
    assert wire_a.frames == 1


def test_a_bad_frame_item_is_skipped_and_counted() -> None:
    import msgpack  # type: ignore[import-untyped]

    b, _, _ = _mesh("w1", {})
    b.receive(msgpack.packb([msgpack.packb([{b"junk": b"1"}, {b"g": b"x"}]), None]))
    assert b._mirror.counters.skipped == 2
    b.receive(msgpack.packb([None, b"\x00"]))  # a load report that is not one
    assert b._mirror.counters.skipped == 3
