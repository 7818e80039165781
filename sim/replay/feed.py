"""The gateway's prefix bookkeeping, done the way `gateway.prefix.PrefixTracker` does it.

At dispatch the prompt's routing blocks are recorded in the `PrefixIndex` for the chosen
replica (its capacity taken from the replica's scraped KV size), and the prompt's predicted
uncached tokens are added to the replica's pending prefill; at the first token they are taken
off again and the TTFT, measured from dispatch, teaches the `OnlineTtftModel`. The simulator
cannot import the gateway, so this mirrors `PrefixTracker.dispatch`, `first_token` and
`_record` line for line; keep them in step.

`EngineCacheIndex` is the oracle's index: the same interface, answered from the engines'
real KV caches (and fed nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from routing.types import RoutingRequest
from scoring.prefix_hash import covered_chars
from scoring.prefix_index import PrefixIndex
from scoring.profiles import PrefixSection
from scoring.ttft_model import OnlineTtftModel
from sim.engine.model import EngineModel
from sim.replay.blocks import routing_blocks_within
from sim.replay.replica import SimReplica

GATEWAY_BLOCK_TOKENS = 16  # gateway.prefix.DEFAULT_BLOCK_TOKENS: the engines' block size


@dataclass(slots=True)
class Dispatch:
    """One request sent to one replica, as far as prefill accounting goes."""

    replica: SimReplica
    at: float
    uncached_tokens: int
    work_tokens: int
    settled: bool = False


class PrefixFeed:
    """Feeds the prefix index and the TTFT model from dispatches and first tokens."""

    def __init__(
        self, section: PrefixSection, index: PrefixIndex, ttft_model: OnlineTtftModel | None
    ) -> None:
        self._section = section
        self.index = index
        self._ttft_model = ttft_model

    def dispatch(
        self, replica: SimReplica, request: RoutingRequest, now: float, scraped: bool
    ) -> Dispatch:
        """`request` goes to `replica`; `scraped`: the gateway has its metrics by now."""
        hashes = request.prefix_hashes
        matched = self.index.match(hashes, (replica.id,))[replica.id] if hashes else 0
        cached = covered_chars(matched, request.prefix_block_chars) / self._section.chars_per_token
        uncached = max(0, int(request.token_estimate - cached))
        work = uncached + replica.pending_prefill_tokens
        replica.pending_prefill_tokens += uncached
        self._record(replica, hashes, request.prefix_block_chars, scraped)
        return Dispatch(replica, now, uncached, work)

    def first_token(self, d: Dispatch, ttft_s: float | None) -> None:
        if d.settled:
            return
        d.settled = True
        d.replica.pending_prefill_tokens -= d.uncached_tokens
        if ttft_s is not None and self._ttft_model is not None:
            self._ttft_model.observe(d.replica.id, d.work_tokens, ttft_s)

    def _record(
        self, replica: SimReplica, hashes: Sequence[int], block_chars: int, scraped: bool
    ) -> None:
        if not hashes:
            return
        cpt = self._section.chars_per_token
        if self._section.capacity_blocks is not None:
            # Configured in the gateway's base blocks; the index here counts trace blocks.
            gateway_chars = (self._section.block_tokens or GATEWAY_BLOCK_TOKENS) * cpt
            capacity: int | None = int(self._section.capacity_blocks * gateway_chars // block_chars)
        elif scraped:
            config = replica.engine.config
            capacity = int(config.num_blocks * config.block_size * cpt // block_chars)
        else:
            capacity = None
        if capacity is not None and capacity != self.index.capacity(replica.id):
            self.index.set_capacity(replica.id, capacity)
        self.index.record(replica.id, hashes)


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
            out[replica] = min(len(hashes), routing_blocks_within(tokens // self._block_tokens))
        return out

    def fill(self, replica: str) -> float:
        kv = self._engines[replica].kv_cache
        return kv.num_cached_blocks / kv.num_blocks

    def record(self, replica: str, hashes: Sequence[int]) -> None:
        return None
