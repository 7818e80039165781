"""Fast-forward through decode-only steps: k steps planned in closed form, applied at once.

When every running request is decoding and the waiting queue's head cannot be admitted, steps
differ only in their KV reads: with D sequences reading K₀ context tokens in the first step,

    duration(i) = a + b·i,   a = overhead + decode_seq_s·D + kv_read_token_s·K₀,
                             b = kv_read_token_s·D,   start(i) = a·i + b·i(i−1)/2

A run does exactly what as many `EngineModel.step()` calls would, and stops at the earliest of:
a step in which a sequence emits its last token (the run's last); a step whose allocations
would not fit (`step()` would preempt); a step after which the waiting head might fit (an
allocation evicts one of its prefix hits, or a commit caches the block extending them); the
caller's time limit (step i ≥ 1 only if start(i) < the limit). `plan` has no side effects and
holds while the engine is untouched (a version counter); `apply` commits a plan's first `steps`
steps (a caller may cut a run short) as `step()` would (docs/decisions/0014-simulator-speed.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.engine.batch_scheduler import BatchScheduler, loaded_tokens
from sim.engine.block_runs import Piece, add_irregular, clipped, shifted
from sim.engine.request import EngineRequest
from sim.engine.types import StepTimeCoefficients


@dataclass(frozen=True, slots=True)
class DecodeRun:
    """k decode-only steps of one engine (see the module docstring)."""

    steps: int
    first_step_s: float  # a: duration of step 0
    step_growth_s: float  # b: each step lasts b longer than the one before
    request_ids: tuple[str, ...]  # the decoding requests, in running order
    first_indices: tuple[int, ...]  # output index each one emits in step 0
    outputs_left: tuple[int, ...]  # tokens each had left to emit at step 0
    free_blocks: int  # free KV blocks before step 0
    block_size: int
    # Step of each sequence's first new block (then one every block_size steps), in running
    # order; `alloc_order` lists the sequences by (phase, position): the order in which one
    # round of block_size steps allocates.
    alloc_phases: tuple[int, ...]
    alloc_order: tuple[int, ...]
    version: int  # the engine's version when planned

    @property
    def decode_seqs(self) -> int:
        return len(self.request_ids)

    def start_s(self, step: int) -> float:
        """Time from the run's start to the start of `step` (= end of step − 1)."""
        return self.first_step_s * step + self.step_growth_s * (step * (step - 1) / 2)

    def duration_s(self, steps: int | None = None) -> float:
        """Duration of the first `steps` steps (all by default)."""
        return self.start_s(self.steps if steps is None else steps)

    def step_duration_s(self, step: int) -> float:
        return self.first_step_s + self.step_growth_s * step

    def steps_started_before(self, origin: float, t: float) -> int:
        """Steps (≥ 1) that start strictly before `t` when the run starts at `origin`."""
        return 1 + _count(lambda i: origin + self.start_s(i) < t, 1, self.steps)

    def steps_ended_by(self, origin: float, t: float) -> int:
        """Steps that end at or before `t` when the run starts at `origin`."""
        return _count(lambda i: origin + self.start_s(i) <= t, 1, self.steps + 1)

    def allocations(self, steps: int) -> int:
        """KV blocks the first `steps` steps allocate."""
        return _allocations(self.alloc_phases, steps, self.block_size)

    def free_blocks_after(self, steps: int) -> int:
        """Free KV blocks once the first `steps` steps are scheduled."""
        return self.free_blocks - self.allocations(steps)

    def finished(self, steps: int | None = None) -> tuple[str, ...]:
        """Requests that emit their last token within the first `steps` steps."""
        n = self.steps if steps is None else steps
        pairs = zip(self.request_ids, self.outputs_left, strict=True)
        return tuple(r for r, left in pairs if left <= n)


def _allocations(phases: Sequence[int], steps: int, block_size: int) -> int:
    return sum((steps - 1 - p) // block_size + 1 for p in phases if p < steps)


def _count(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """How many i in [lo, hi) satisfy a predicate that is true up to some i, then false."""
    first, last = lo, hi  # invariant: pred true below `first`, false from `last`
    while first < last:
        mid = (first + last) // 2
        if pred(mid):
            first = mid + 1
        else:
            last = mid
    return first - lo


@dataclass(frozen=True, slots=True)
class _HeadGuard:
    """What could let the blocked waiting head in during a run."""

    evictable_hits: frozenset[int]  # its cache hits sitting in the free queue
    next_hash: int | None  # the hash that would extend its hits, if cached


_NEVER = _HeadGuard(frozenset(), None)


def plan(
    scheduler: BatchScheduler, timing: StepTimeCoefficients, max_duration_s: float, version: int
) -> DecodeRun | None:
    """The longest decode-only run from the current state, or None if the next step is not
    one (a prefill, an admission or a preemption is due)."""
    running = scheduler.running
    config = scheduler.config
    seqs = len(running)
    if seqs == 0 or seqs > config.max_num_batched_tokens:
        return None
    bs = config.block_size
    caching = config.enable_prefix_caching
    kv_read = 0
    steps = 1 << 62
    phases = []
    for r in running:
        c = r.num_computed
        if r.prefilling or r.num_tokens - c != 1 or len(r.blocks) != -(-c // bs):
            return None
        if caching and r.num_committed_blocks != c // bs:
            return None
        kv_read += c + 1
        steps = min(steps, r.output_len - r.num_generated)
        phases.append(len(r.blocks) * bs - c)  # step i computes token c + i
    guard = _head_guard(scheduler, config.max_num_batched_tokens - seqs)
    if guard is None:
        return None
    a = timing.overhead_s + timing.decode_seq_s * seqs + timing.kv_read_token_s * kv_read
    b = timing.kv_read_token_s * seqs
    if max_duration_s < math.inf:

        def before_limit(i: int) -> bool:
            return a * i + b * (i * (i - 1) / 2) < max_duration_s

        steps = 1 + _count(before_limit, 1, steps)
    order = sorted(range(seqs), key=phases.__getitem__)  # stable: ties keep position order
    steps = _cut(scheduler, phases, order, steps, guard)
    if steps == 0:
        return None
    return DecodeRun(
        steps=steps,
        first_step_s=a,
        step_growth_s=b,
        request_ids=tuple(r.request_id for r in running),
        first_indices=tuple(r.num_generated for r in running),
        outputs_left=tuple(r.output_len - r.num_generated for r in running),
        free_blocks=scheduler.kv_cache.num_free_blocks,
        block_size=bs,
        alloc_phases=tuple(phases),
        alloc_order=tuple(order),
        version=version,
    )


def _head_guard(scheduler: BatchScheduler, budget: int) -> _HeadGuard | None:
    """None if the waiting head would be admitted now; else what could change that."""
    config = scheduler.config
    if not scheduler.waiting or budget <= 0 or len(scheduler.running) >= config.max_num_seqs:
        return _NEVER
    kv = scheduler.kv_cache
    bs = config.block_size
    request = scheduler.waiting[0]
    hashes: list[int] = []
    hits: list[int] = []
    if config.enable_prefix_caching:
        max_blocks = (request.num_tokens - 1) // bs
        hashes = request.block_hashes(bs)[:max_blocks]
        hits = kv.cached_blocks(hashes)
    cached = len(hits) * bs
    loaded = loaded_tokens(request, cached)
    total = request.num_computed + cached + loaded
    total += min(request.num_tokens - cached - loaded, budget)
    required = -(-total // bs) - len(request.blocks) - len(hits)
    evictable = kv.evictable(hits)
    # As BatchScheduler._allocate decides: touching a free hit uses up a free block too.
    need = max(required, 0) + len(evictable) if hits else required
    if need <= kv.num_free_blocks:
        return None
    next_hash = hashes[len(hits)] if len(hits) < len(hashes) else None
    return _HeadGuard(frozenset(evictable), next_hash)


def _cut(
    scheduler: BatchScheduler,
    phases: list[int],
    order: list[int],
    steps: int,
    guard: _HeadGuard,
) -> int:
    """Stop before the first step that would preempt or might admit the waiting head.

    Allocation e (0-based, in the order step() makes them) is sequence order[e mod D]'s
    in round e div D, at step phase + round × block_size.
    """
    kv = scheduler.kv_cache
    bs = scheduler.config.block_size
    running = scheduler.running
    seqs = len(running)

    def step_of(e: int) -> int:
        return phases[order[e % seqs]] + (e // seqs) * bs

    free = kv.num_free_blocks
    allocs = _allocations(phases, steps, bs)
    if allocs > free:
        steps = step_of(free)  # the first allocation that would not fit preempts
        allocs = _allocations(phases, steps, bs)
    if guard.evictable_hits and allocs:
        for e, block in enumerate(kv.peek_free(allocs)):
            if block in guard.evictable_hits:
                steps = step_of(e)
                break
    if guard.next_hash is not None:
        for r in running:
            start = r.num_committed_blocks
            first_commit = (start + 1) * bs - r.num_computed - 1
            commits = (steps - 1 - first_commit) // bs + 1 if first_commit < steps else 0
            hashes = r.block_hashes(bs)
            if guard.next_hash in hashes[start : start + commits]:
                m = hashes.index(guard.next_hash, start)
                steps = min(steps, first_commit + (m - start) * bs)
    return steps


def _hand_out(
    allocated: tuple[list[int], list[Piece]],
    running: list[EngineRequest],
    run: DecodeRun,
    steps: int,
) -> None:
    """Give the run's new blocks to the sequences in the order `step()` allocates them."""
    blocks, cut = allocated
    seqs = len(running)
    if seqs == 1:  # all of them, in order: their pieces hold
        request = running[0]
        request.runs += shifted(cut, len(request.blocks))
        request.blocks += blocks
        return
    bs = run.block_size
    phases = run.alloc_phases
    before = [len(r.blocks) for r in running]
    # Whole rounds hand one block to every sequence, in `alloc_order`.
    rounds = min(((steps - 1 - p) // bs + 1 if p < steps else 0) for p in phases)
    whole = rounds * seqs
    for rank, p in enumerate(run.alloc_order):
        running[p].blocks += blocks[rank:whole:seqs]
    e = whole
    m = rounds
    while e < len(blocks):
        for p in run.alloc_order:
            if phases[p] + m * bs < steps:
                running[p].blocks.append(blocks[e])
                e += 1
        m += 1
    for request, start in zip(running, before, strict=True):
        if len(request.blocks) > start:
            add_irregular(request.runs, start, len(request.blocks))


def apply(scheduler: BatchScheduler, run: DecodeRun, steps: int) -> list[EngineRequest]:
    """Commit the first `steps` steps of `run`; returns the requests that finished."""
    kv = scheduler.kv_cache
    running = scheduler.running
    bs = run.block_size
    phases = run.alloc_phases
    allocs = _allocations(phases, steps, bs)
    if allocs:
        _hand_out(kv.allocate_runs(allocs), running, run, steps)
    finished = []
    if scheduler.config.enable_prefix_caching and kv.events is not None:
        _commit_each(scheduler, steps)
    elif scheduler.config.enable_prefix_caching:
        block_ids: list[int] = []
        hashes: list[int] = []
        pieces: list[Piece] = []
        for request in running:
            start = request.num_committed_blocks
            end = (request.num_computed + steps) // bs
            if end > start:
                pieces += shifted(clipped(request.runs, start, end), len(block_ids))
                block_ids += request.blocks[start:end]
                hashes += request.block_hashes(bs)[start:end]
                request.num_committed_blocks = end
        if block_ids:
            kv.cache_blocks(block_ids, hashes, pieces)
    for request in running:
        request.num_computed += steps
        request.num_generated += steps
        request.num_tokens += steps
        if request.num_generated == request.output_len:
            finished.append(request)
    return finished


def _commit_each(scheduler: BatchScheduler, steps: int) -> None:
    """`apply`'s commits request by request (the same cache in the end), so that each
    request's stored blocks are recorded with their tokens."""
    bs = scheduler.config.block_size
    for request in scheduler.running:
        start = request.num_committed_blocks
        end = (request.num_computed + steps) // bs
        if end > start:
            hashes = request.block_hashes(bs)
            scheduler.kv_cache.cache_blocks(
                request.blocks[start:end],
                hashes[start:end],
                clipped(request.runs, start, end),
                (request.tokens, hashes, start),
            )
            request.num_committed_blocks = end
