"""What each engine's prefix cache holds, exactly, as its KV-cache events tell.

A data structure, not a plugin, fed with each backend's decoded events; the precise scorers
read it. Keys are kvgate's own chained token-block keys (`scoring.state.token_blocks`): a
`BlockStored` run is keyed from its `token_ids`, chained from its parent's key (a first block
from the root key of the backend's model, or of the event's LoRA adapter); a run without token
ids (the simulator's hashed traces) is keyed by its engine hashes. Per backend: `engine hash →
own key`, reference-counted, for `BlockRemoved`; `own key → how many engine hashes hold it`,
which requests match. A run whose parent was never seen, or whose first block carries a cache
salt, is `orphaned`; `AllBlocksCleared` (or `reset`) empties a backend.

`speculate` counts a dispatched request's keys as held for `ttl_s` or until stored. A
request's depth on a backend is its number of leading keys held; `cached_tokens` turns it into
the prompt tokens the engine would report cached. Pure and synchronous: callers pass the time.
Reference counts and vLLM's re-announced hits: docs/decisions/0010-precise-index.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent
from scoring.state.token_blocks import root_key, token_block_keys

_SALTED = "\x00salted\x00"  # a root no request's key chains from
ENTRY_BYTES = 200  # per engine block held, as measured (module docstring)


@dataclass(slots=True)
class PreciseCounters:
    """One backend's event bookkeeping, cumulative."""

    stored_blocks: int = 0
    removed_blocks: int = 0
    orphaned_blocks: int = 0  # stored under a parent the index never saw, or salted
    unknown_removals: int = 0  # removals of hashes the index never keyed
    clears: int = 0
    reannounced_blocks: int = 0  # held blocks announced again (report mode "full")


class _Backend:
    __slots__ = ("block_size", "counters", "held", "key_of", "refs", "speculated")

    def __init__(self) -> None:
        self.key_of: dict[int, int] = {}  # engine hash → own key
        self.refs: dict[int, int] = {}  # engine hash → extra references (only when > 1)
        self.held: Counter[int] = Counter()  # own key → engine hashes keyed to it
        self.speculated: dict[int, float] = {}  # own key → expiry
        self.block_size: int | None = None
        self.counters = PreciseCounters()


class PreciseIndex:
    """Per-backend exact view of the engines' prefix caches, from their KV-cache events."""

    def __init__(self, speculative_ttl_s: float = 2.0) -> None:
        if speculative_ttl_s < 0:
            raise ValueError("speculative_ttl_s must be >= 0")
        self._ttl = speculative_ttl_s
        self._backends: dict[str, _Backend] = {}

    # --- feeding -------------------------------------------------------------------------

    def apply(self, backend: str, events: Iterable[KvEvent], model: str = "") -> None:
        """Apply `backend`'s events in order. `model` names the root of its base-model blocks'
        keys (a LoRA adapter's blocks root at the adapter's name); the index is per backend,
        so the gateway leaves it empty and keys a base-model request from `root_key("")`."""
        b = self._backends.get(backend)
        if b is None:
            b = self._backends[backend] = _Backend()
        for event in events:
            if isinstance(event, BlockStored):
                self._stored(b, event, model)
            elif isinstance(event, BlockRemoved):
                self._removed(b, event.block_hashes)
            elif isinstance(event, AllBlocksCleared):
                self._clear(b)
                b.counters.clears += 1

    def _stored(self, b: _Backend, e: BlockStored, model: str) -> None:
        b.block_size = e.block_size
        hashes = e.block_hashes
        if e.parent_block_hash is None and len(hashes) > 1 and all(h in b.key_of for h in hashes):
            b.counters.reannounced_blocks += len(hashes)  # its hits, announced again
            return
        keys: Sequence[int]
        if not e.token_ids and not e.salted:
            keys = hashes  # known by hashes only (see the module docstring)
        else:
            if e.parent_block_hash is None:
                parent: int | None = root_key(_SALTED + model if e.salted else e.lora_name or model)
            else:
                parent = b.key_of.get(e.parent_block_hash)
            if parent is None or e.salted or len(e.token_ids) < len(hashes) * e.block_size:
                b.counters.orphaned_blocks += len(hashes)
                return
            keys = token_block_keys(e.token_ids, e.block_size, parent)
        key_of, refs, held, spec = b.key_of, b.refs, b.held, b.speculated
        for h, k in zip(hashes, keys, strict=False):
            if h in key_of:
                refs[h] = refs.get(h, 1) + 1
                continue
            key_of[h] = k
            held[k] += 1
            spec.pop(k, None)
        b.counters.stored_blocks += len(hashes)

    def _removed(self, b: _Backend, hashes: Sequence[int]) -> None:
        key_of, refs, held = b.key_of, b.refs, b.held
        for h in hashes:
            extra = refs.get(h)
            if extra is not None:  # stored more than once: this removal drops one reference
                if extra > 2:
                    refs[h] = extra - 1
                else:
                    del refs[h]
                continue
            k = key_of.pop(h, None)
            if k is None:
                b.counters.unknown_removals += 1
                continue
            b.counters.removed_blocks += 1
            if held[k] > 1:
                held[k] -= 1
            else:
                del held[k]

    @staticmethod
    def _clear(b: _Backend) -> None:
        b.key_of.clear()
        b.refs.clear()
        b.held.clear()
        b.speculated.clear()

    def reset(self, backend: str) -> None:
        """Forget what `backend` holds (its events can no longer be trusted to be complete)."""
        if (b := self._backends.get(backend)) is not None:
            self._clear(b)

    def remove_backend(self, backend: str) -> None:
        self._backends.pop(backend, None)

    def speculate(self, backend: str, keys: Sequence[int], now: float) -> None:
        """`backend` was sent a prompt of `keys`: count them held until `now + ttl_s`, or
        until its events store them."""
        b = self._backends.get(backend)
        if b is None or not self._ttl:
            return
        until = now + self._ttl
        spec, held = b.speculated, b.held
        if len(spec) > 4 * len(held) + 1024:  # purge the expired now and then
            for k in [k for k, t in spec.items() if t <= now]:
                del spec[k]
        for k in keys:
            if k not in held:
                spec[k] = until

    # --- reading -------------------------------------------------------------------------

    def tracks(self, backend: str) -> bool:
        """Whether `backend`'s events reach the index (it has applied at least one batch)."""
        return backend in self._backends

    def block_size(self, backend: str) -> int | None:
        b = self._backends.get(backend)
        return b.block_size if b is not None else None

    def block_sizes(self) -> set[int]:
        """The block sizes of the tracked backends (the sizes a request's keys are cut in)."""
        return {s for b in self._backends.values() if (s := b.block_size) is not None}

    def blocks(self, backend: str) -> int:
        """Distinct keys `backend` holds (speculation aside)."""
        b = self._backends.get(backend)
        return len(b.held) if b is not None else 0

    def memory_bytes(self, backend: str) -> int:
        """Estimated bytes of `backend`'s entries: `ENTRY_BYTES` per engine block it holds."""
        b = self._backends.get(backend)
        return len(b.key_of) * ENTRY_BYTES if b is not None else 0

    def counters(self, backend: str) -> PreciseCounters | None:
        b = self._backends.get(backend)
        return b.counters if b is not None else None

    def depth(self, backend: str, keys: Sequence[int], now: float | None = None) -> int:
        """Leading `keys` that `backend` holds (or, with `now`, holds or was sent within the
        speculation window); 0 for a backend the index does not track."""
        return self.depths(backend, keys, now)[1]

    def depths(
        self, backend: str, keys: Sequence[int], now: float | None = None
    ) -> tuple[int, int]:
        """(leading `keys` its events say `backend` holds, the same counting what was sent
        within the speculation window at `now`; equal without `now`), in one pass."""
        b = self._backends.get(backend)
        if b is None or not keys:
            return 0, 0
        flags = list(map(b.held.__contains__, keys))
        try:
            held = flags.index(False)
        except ValueError:
            return len(keys), len(keys)
        if now is None or not b.speculated:
            return held, held
        spec, depth = b.speculated, held
        while depth < len(keys) and (flags[depth] or spec.get(keys[depth], float("-inf")) > now):
            depth += 1
        return held, depth


def cached_tokens(depth: int, prompt_tokens: int, block_size: int) -> int:
    """Prompt tokens an engine serves from its cache when it holds the prompt's first `depth`
    blocks: vLLM computes at least the prompt's last token, so a prompt of whole blocks all
    held still recomputes its last block."""
    if prompt_tokens <= 0:
        return 0
    return min(depth, (prompt_tokens - 1) // block_size) * block_size
