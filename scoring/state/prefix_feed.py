"""The prefix feed: what the gateway and the simulator both do around each routing decision.

The one place that feeds what outlives a request: the `PrefixIndex`, each endpoint's pending
prefill and the `OnlineTtftModel` (docs/architecture.md, "The prefix feed"). An endpoint is
anything with an `id` and a mutable `pending_prefill_tokens`. Pure and synchronous.

- `dispatch`: predicted uncached tokens onto pending prefill (a P/D decode leg's: none), blocks;
- `first_token`: pending prefill off; the TTFT teaches the line `work_tokens → TTFT`;
- `remote_dispatch`: another gateway's dispatch, learnt late, counts in the work of this
  feed's dispatches sent after it, or, its tokens unknown, makes them blind (not learnt);
- `forget`: an endpoint went away; `withdraw`: a failed attempt's blocks are taken back;
- `observe_cached`: an evident eviction (`scoring.state.cache_check`) evicts the same weight of
  the endpoint's oldest entries (docs/decisions/0006-engine-cache-feedback.md);
- `observe_prompt`: the prompt bytes per engine token, learnt, turn KV tokens into capacity;
- `block_chars`: the routing block size, following the engines'; a new size restarts the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from routing.config.profiles import PrefixSection
from routing.types import EndpointSnapshot, RoutingRequest
from scoring.state.cache_check import CacheCheck, check_cached
from scoring.state.prefix_hash import covered_chars
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default KV block size, until an engine reports its own
LEARN_MIN_TOKENS = 4096  # engine prompt tokens seen before the learned bytes/token apply
LEARN_DECAY = 0.99  # per answer: the mean follows the last few hundred prompts


class FeedTarget(Protocol):
    """An endpoint as the feed sees it: its id and the gateway's pending-prefill count."""

    @property
    def id(self) -> str: ...

    pending_prefill_tokens: int


E = TypeVar("E", bound=FeedTarget)


@dataclass(slots=True)
class Dispatch(Generic[E]):
    """One request sent to one endpoint, as far as prefill accounting goes."""

    endpoint: E
    at: float  # when it was sent (the caller's clock)
    uncached_tokens: int  # predicted at dispatch
    work_tokens: int  # its own plus the endpoint's earlier pending prefill
    settled: bool = False
    request: RoutingRequest | None = None
    matched: int = 0  # leading blocks the index said the endpoint held
    epoch: int = 0  # the feed's block size generation: after a change the hashes mean nothing
    precise_cached: int | None = None  # cached tokens the precise index predicted (None: no view)
    precise_cached_events: int | None = None  # the same from the events alone (no speculation)
    blind: bool = False  # another gateway's earlier dispatch was unseen: work_tokens too low
    leg: str = "whole"  # whole | prefill | decode (the legs of a split P/D request)
    moved_tokens: int = 0  # a decode leg: the prompt tokens it receives from P


def kv_tokens(num_blocks: int | None, block_size: int | None) -> int | None:
    """An engine's KV capacity in tokens, if it reported both numbers."""
    return num_blocks * block_size if num_blocks and block_size else None


class PrefixFeed:
    """Feeds the prefix index and the TTFT model from dispatches and first tokens."""

    def __init__(
        self,
        section: PrefixSection,
        index: PrefixIndex,
        ttft_model: OnlineTtftModel | None = None,
    ) -> None:
        self._section = section
        # Read per request, a plain attribute (a pydantic model's `__getattr__` makes every
        # attribute read on it the slower lookup); the section is frozen.
        self._cpt = section.chars_per_token
        self._follow_engines = section.block_tokens is None
        self.index = index
        self._ttft_model = ttft_model  # None: do not learn
        self._block_chars = self._chars(section.block_tokens or DEFAULT_BLOCK_TOKENS)
        self._epoch = 0
        self._prompt_bytes = 0.0  # decayed sums of prompt bytes and engine tokens
        self._prompt_tokens = 0.0
        # Per endpoint, the dispatches awaiting their first token, by id().
        self._unsettled: dict[str, dict[int, Dispatch[Any]]] = {}

    def _chars(self, tokens: int) -> int:
        return max(1, round(tokens * self._section.chars_per_token))

    @property
    def chars_per_token(self) -> float:
        return self._cpt

    @property
    def capacity_chars_per_token(self) -> float:
        """Prompt bytes per engine token, as learned (`observe_prompt`), else configured."""
        if self._prompt_tokens < LEARN_MIN_TOKENS:
            return self._cpt
        return self._prompt_bytes / self._prompt_tokens

    def observe_prompt(self, d: Dispatch[Any], prompt_tokens: int) -> None:
        """The engine counted `prompt_tokens` for `d`'s prompt (see the module docstring)."""
        r = d.request
        if r is None or prompt_tokens <= 0 or r.token_estimate <= 0:
            return
        prompt_bytes = r.token_estimate * self._cpt
        if not 0.5 <= prompt_bytes / prompt_tokens <= 32.0:  # not a tokenizer: ignore
            return
        self._prompt_bytes = self._prompt_bytes * LEARN_DECAY + prompt_bytes
        self._prompt_tokens = self._prompt_tokens * LEARN_DECAY + prompt_tokens

    def block_chars(self, endpoints: Sequence[EndpointSnapshot]) -> int:
        """The routing block size in bytes, following the engines' block size if unset."""
        if self._follow_engines:
            sizes = {
                size for e in endpoints if (m := e.metrics) is not None and (size := m.block_size)
            }
            if sizes:
                chars = self._chars(min(sizes))
                if chars != self._block_chars:
                    self.index.clear()
                    self._block_chars = chars
                    self._epoch += 1
        return self._block_chars

    def dispatch(
        self,
        endpoint: E,
        request: RoutingRequest,
        now: float,
        kv_tokens: int | None,
        queued_elsewhere: int = 0,
        *,
        leg: str = "whole",
        record: bool = True,
    ) -> Dispatch[E]:
        """`request` goes to `endpoint` at `now`; `kv_tokens`: the endpoint's KV capacity in
        tokens as last scraped (None: not known yet); `queued_elsewhere`: prefill tokens other
        gateways sent there and await a first token for (shared state), which the request
        waits for too. A `decode` leg queues no prefill; `record=False`: the endpoint keeps
        no prefix cache of it (an SGLang decode backend)."""
        hashes = request.prefix_hashes
        block_chars = request.prefix_block_chars
        matched = self.index.match(hashes, (endpoint.id,))[endpoint.id] if hashes else 0
        cached = covered_chars(matched, block_chars) / self._cpt
        uncached = max(0, int(request.token_estimate - cached))
        moved = 0
        if leg == "decode":
            moved, uncached = uncached, 0
        work = uncached + endpoint.pending_prefill_tokens + queued_elsewhere
        endpoint.pending_prefill_tokens += uncached
        if hashes and record:
            self.record(endpoint.id, hashes, block_chars, kv_tokens)
        d = Dispatch(endpoint, now, uncached, work, False, request, matched, self._epoch)
        d.leg, d.moved_tokens = leg, moved
        self._unsettled.setdefault(endpoint.id, {})[id(d)] = d
        return d

    def first_token(self, d: Dispatch[Any], ttft_s: float | None) -> tuple[int, float] | None:
        """The endpoint answered (`ttft_s` measured from dispatch when known): its prefill
        for this request is done. Returns the point `(work tokens, TTFT)` the answer teaches
        (learnt here, and for the caller to share), or None: settled before, no TTFT, or a
        blind dispatch. Settling twice is a no-op."""
        if d.settled:
            return None
        d.settled = True
        d.endpoint.pending_prefill_tokens -= d.uncached_tokens
        waiting = self._unsettled.get(d.endpoint.id)
        if waiting is not None:
            waiting.pop(id(d), None)
        if ttft_s is None or d.blind:
            return None
        if self._ttft_model is not None:
            self._ttft_model.observe(d.endpoint.id, d.work_tokens, ttft_s)
        return d.work_tokens, ttft_s

    def remote_dispatch(self, endpoint_id: str, at: float, tokens: int | None = None) -> int:
        """Another gateway dispatched a request of `tokens` predicted uncached prompt tokens
        (None: not known) to `endpoint_id` at `at` (this feed's clock), which this feed
        learns only now: its unsettled dispatches there since `at` waited for that prefill
        too. Count it in their work, or, not knowing it, mark them blind. Returns how many
        dispatches were corrected or marked."""
        marked = 0
        for d in self._unsettled.get(endpoint_id, {}).values():
            if d.at < at or d.blind:
                continue
            if tokens is None:
                d.blind = True
            else:
                d.work_tokens += tokens
            marked += 1
        return marked

    def forget(self, endpoint_id: str) -> None:
        self.index.remove_replica(endpoint_id)

    def withdraw(self, d: Dispatch[Any]) -> int:
        """The endpoint did not serve `d`'s request: settle its prefill and drop the blocks
        the dispatch added (those past the match). Returns the blocks dropped."""
        self.first_token(d, None)
        r = d.request
        if r is None or not r.prefix_hashes or d.epoch != self._epoch:
            return 0
        return self.index.drop(d.endpoint.id, r.prefix_hashes, d.matched)

    def current(self, d: Dispatch[Any]) -> bool:
        """Whether `d`'s hashes are still cut in the feed's block size."""
        return d.epoch == self._epoch

    def observe_cached(
        self,
        d: Dispatch[Any],
        prompt_tokens: int,
        cached_tokens: int,
        engine_block_tokens: int | None = None,
    ) -> CacheCheck | None:
        """The engine served `d`'s request with `cached_tokens` of its `prompt_tokens` from
        its prefix cache (`engine_block_tokens`: its KV block size, if known). Compare with the
        prediction at dispatch and correct the index on an evident eviction (see the module
        docstring). None when the request had no prompt to compare."""
        r = d.request
        if r is None:
            return None
        check = check_cached(
            matched=d.matched,
            block_chars=r.prefix_block_chars,
            token_estimate=r.token_estimate,
            chars_per_token=self._section.chars_per_token,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached_tokens,
            engine_block_tokens=engine_block_tokens
            or round(self._block_chars / self.chars_per_token),
        )
        if check is None or not check.evicted_weight or d.epoch != self._epoch:
            return check
        dropped = self.index.evict_oldest(d.endpoint.id, check.evicted_weight, r.prefix_hashes)
        return replace(check, dropped_entries=dropped)

    def record(
        self, endpoint_id: str, hashes: Sequence[int], block_chars: int, kv_tokens: int | None
    ) -> None:
        """The endpoint was given these blocks (by this gateway's dispatch, or by another
        gateway's, which the shared state's mirror records here): into the index, bounded by
        the endpoint's capacity (`kv_tokens`, None: not known yet; or the configured one), so a
        replica another gateway fills evicts in this index too, not only where it was sent."""
        section = self._section
        if section.capacity_blocks is not None:
            # Configured in blocks of the feed's own size; the hashes may be cut finer.
            capacity: int | None = int(section.capacity_blocks * self._block_chars // block_chars)
        elif kv_tokens is not None:
            capacity = int(kv_tokens * self.capacity_chars_per_token // block_chars)
        else:
            capacity = None
        if capacity is not None and capacity != self.index.capacity(endpoint_id):
            self.index.set_capacity(endpoint_id, capacity)
        self.index.record(endpoint_id, hashes)
