"""Type stub of the compiled spared-head search (`lru_tails_native.pyx`)."""

from collections.abc import Sequence
from typing import Any, Literal

def spared_hits(
    where: dict[int, int | set[int]],
    hashes: Sequence[int],
    walked: dict[int, tuple[str, Any, int]],
    depths: Sequence[int],
) -> dict[int, int] | Literal[False] | None: ...
