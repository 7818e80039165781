"""Type stub of the compiled eviction walks (`displaced_native.pyx`)."""

from collections.abc import Mapping, Sequence

from scoring.state.lru_tails import Missed, Spared, Tail

def walks(
    replicas: list[str],
    new_weights: list[int],
    rooms: Mapping[str, int],
    kept: Mapping[str, Tail],
    hashes: Sequence[int],
    depths: Sequence[int],
    out: list[float],
    never_full: int,
) -> tuple[Missed, Spared] | None: ...
