"""The oracle's prefix index: the `PrefixIndex` interface, answered from the engines' caches.

Policy `oracle` routes with perfect signals; its prefix matches come from what each engine's
KV cache really holds instead of from what the gateway recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from scoring.state.prefix_hash import blocks_covered_by
from scoring.state.prefix_index import PrefixIndex
from sim.engine.model import EngineModel


class EngineCacheIndex(PrefixIndex):
    """The oracle's prefix index: matches from what each engine's KV cache really holds.

    `prepare` names the request about to be routed (its engine block hashes), since the
    scorers pass only its routing hashes; each engine's cached prefix is then looked up once
    (the engines must not change until the next `prepare`). A match counts the routing
    blocks lying entirely within the engine's cached prefix (as vLLM looks it up: never the
    prompt's last token).
    `fill` is the share of the engine's blocks that hold a cached hash. Recording does
    nothing: there is nothing to learn.
    """

    def __init__(self, engines: Mapping[str, EngineModel]) -> None:
        super().__init__()
        self._engines = engines
        self._routing: Sequence[int] = ()
        self._engine_hashes: Sequence[int] = ()
        self._block_tokens = 1
        # Cached blocks per replica for the prepared request: several scorers and the
        # dispatch ask, and the caches do not change within one decision.
        self._found: dict[str, int] = {}

    def prepare(
        self,
        routing_hashes: Sequence[int],
        engine_hashes: Sequence[int],
        prompt_tokens: int,
        block_tokens: int,
    ) -> None:
        self._routing = routing_hashes
        bs = next(iter(self._engines.values())).config.block_size
        self._engine_hashes = engine_hashes[: (prompt_tokens - 1) // bs]
        self._block_tokens = block_tokens
        self._found = {}

    def match(self, hashes: Sequence[int], replicas: Iterable[str]) -> dict[str, int]:
        if hashes is not self._routing:
            raise RuntimeError("EngineCacheIndex.match: call prepare() for this request first")
        out = {}
        found = self._found
        for replica in replicas:
            engine = self._engines[replica]
            blocks = found.get(replica)
            if blocks is None:
                blocks = found[replica] = engine.kv_cache.find_cached_prefix(self._engine_hashes)
            tokens = blocks * engine.config.block_size
            out[replica] = min(len(hashes), blocks_covered_by(tokens // self._block_tokens))
        return out

    def fill(self, replica: str) -> float:
        kv = self._engines[replica].kv_cache
        return kv.num_cached_blocks / kv.num_blocks

    def record(self, replica: str, hashes: Sequence[int]) -> None:
        return None
