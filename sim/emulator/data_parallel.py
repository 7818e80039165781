"""An emulated data-parallel engine: N ranks (`Replica`s) behind one HTTP endpoint.

A request may name its rank as routers do: vLLM's header `X-data-parallel-rank`, SGLang's body
field `routed_dp_rank` (older `data_parallel_rank`), each honoured by its own engine only; a
rank out of range is refused (400). Otherwise the engine balances as vLLM's front end does:
the rank with the least `4 × waiting + running` (ties in turn), waiting counting requests
queued in the engine model. One rank: every request goes to it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from sim.emulator.replica import Replica

RANK_HEADER = b"x-data-parallel-rank"
RANK_FIELDS = ("routed_dp_rank", "data_parallel_rank")


class RankOutOfRange(ValueError):
    """A request named a rank the engine does not have."""


class RankBalancer:
    """Chooses the rank of each request (see the module docstring)."""

    def __init__(self, ranks: Sequence[Replica]) -> None:
        if not ranks:
            raise ValueError("an engine has at least one rank")
        self.ranks = tuple(ranks)
        self._turn = itertools.count()
        self.named = [0] * len(ranks)  # requests that named each rank
        self.balanced = [0] * len(ranks)  # requests the engine placed on each rank

    def choose(self, header: str | None, body: Mapping[str, Any]) -> Replica:
        """The rank a request goes to, from its header (vLLM) or body (SGLang)."""
        named = self._named(header, body)
        if named is not None:
            if not 0 <= named < len(self.ranks):
                raise RankOutOfRange(
                    f"data parallel rank {named} is out of range [0, {len(self.ranks)})"
                )
            self.named[named] += 1
            return self.ranks[named]
        if len(self.ranks) == 1:
            return self.ranks[0]
        start = next(self._turn) % len(self.ranks)
        order = self.ranks[start:] + self.ranks[:start]
        best = min(order, key=_load)
        self.balanced[self.ranks.index(best)] += 1
        return best

    def _named(self, header: str | None, body: Mapping[str, Any]) -> int | None:
        if self.ranks[0].engine_name == "sglang":
            for field in RANK_FIELDS:
                value = body.get(field)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
            return None
        if header is None or not header.strip():
            return None
        try:
            return int(header)
        except ValueError:
            raise RankOutOfRange(f"X-data-parallel-rank {header[:20]!r} is not a rank") from None


def _load(replica: Replica) -> int:
    waiting, running, _ = replica.engine.load()
    return 4 * waiting + running
