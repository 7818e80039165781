"""One emulated replica: an `EngineModel` driven in real time by an asyncio task.

The driver loop asks the model for a step, sleeps for the step's modelled duration divided
by `speedup` (against a deadline, so Python overhead does not accumulate as drift), then
delivers the step's tokens to the waiting requests. Requests added during a step join the
next one, as in vLLM's engine loop. Requests for a LoRA adapter first wait for one of the
adapter slots (`sim.emulator.lora`). A request may come with transferred prompt tokens or
hold its blocks when finished (P/D, `sim.emulator.disagg`); while the waiting requests need
blocks that held requests keep, the loop sleeps until a `release`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from routing.kv_events import KvEvent
from sim.emulator.engines import Engine
from sim.emulator.lora import LoraSettings, LoraSlots
from sim.emulator.metrics import LoraInfoGauge, ReplicaMetrics
from sim.emulator.sglang_metrics import SglangMetrics
from sim.engine.kv_events import external_hash
from sim.engine.model import EngineModel
from sim.engine.types import EngineProfile, EngineStats, TokenEvent

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Generation:
    """A request in flight: tokens arrive on `events`; `None` marks the end."""

    request_id: str
    prompt_tokens: int
    output: Sequence[int]
    arrival: float
    events: asyncio.Queue[TokenEvent | None] = field(default_factory=asyncio.Queue)
    cached_tokens: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    adapter: str | None = None  # the LoRA adapter it runs with, if any


class Replica:
    """An engine model plus its real-time driver, LoRA adapter slots and metrics named as
    `engine`'s (vLLM's or SGLang's)."""

    def __init__(
        self,
        profile: EngineProfile,
        model_name: str,
        speedup: float = 1.0,
        lora: LoraSettings | None = None,
        kv_events: bool = False,
        *,
        engine: Engine = "vllm",
        rank: int | None = None,
    ):
        if speedup <= 0:
            raise ValueError("speedup must be > 0")
        self.engine_name = engine  # whose HTTP surface and metric names it shows
        self.rank = rank  # its data-parallel rank, if it is one of several behind one endpoint
        self.profile = profile
        self.model_name = model_name
        self.speedup = speedup
        self.engine = EngineModel(profile.config, profile.timing, kv_events)
        # Where each step's KV-cache events go (with `kv_events`; `sim.emulator.kv_publisher`).
        self.on_kv_events: Callable[[list[KvEvent]], Awaitable[None]] | None = None
        self.loras = LoraSlots(lora or LoraSettings(), speedup)
        lora_info = None
        stats = self.engine.stats
        if self.loras.settings.adapters:  # vLLM exports the gauge with LoRA enabled only
            loras = self.loras
            lora_info = LoraInfoGauge(loras.settings.max_loras, loras.running, loras.waiting)
            stats = self._stats_with_held
        self.metrics: ReplicaMetrics | SglangMetrics
        if engine == "sglang":  # SGLang reports no LoRA state in its metrics
            self.metrics = SglangMetrics(model_name, profile.config, stats, rank)
        else:
            self.metrics = ReplicaMetrics(model_name, profile.config, stats, lora_info, rank or 0)
        self._live: dict[str, Generation] = {}
        self._wakeup = asyncio.Event()
        self._ids = itertools.count()
        self._id_base = secrets.token_hex(4)  # ids unique across replicas, like vLLM's

    @property
    def in_flight(self) -> int:
        return len(self._live) + self.loras.held

    @property
    def adapters(self) -> tuple[str, ...]:
        return self.loras.settings.adapters

    @property
    def max_model_len(self) -> int:
        return self.profile.config.max_model_len

    def new_request_id(self, prefix: str) -> str:
        return f"{prefix}-{self._id_base}{next(self._ids):08x}"

    def submit(
        self,
        request_id: str,
        prompt: Sequence[int],
        output: Sequence[int],
        *,
        external_tokens: int = 0,
        hold: bool = False,
        events: asyncio.Queue[TokenEvent | None] | None = None,
    ) -> Generation:
        """Queue a request (ValueError if the engine rejects it) and return its handle;
        `external_tokens`, `hold` as `EngineModel.add_request` takes them; `events`: a queue
        its tokens share with others' (a batch's; each event names its request)."""
        self.engine.add_request(
            request_id, prompt, output, external_tokens=external_tokens, hold=hold
        )
        loop = asyncio.get_running_loop()
        gen = Generation(request_id, len(prompt), output, arrival=loop.time())
        if events is not None:
            gen.events = events
        self._live[request_id] = gen
        self._wakeup.set()
        return gen

    async def admit(
        self,
        request_id: str,
        prompt: Sequence[int],
        output: Sequence[int],
        adapter: str | None,
        *,
        external_tokens: int = 0,
        hold: bool = False,
        events: asyncio.Queue[TokenEvent | None] | None = None,
    ) -> Generation:
        """`submit`, for the base model (`adapter` None) or after waiting for the adapter's
        slot and load."""
        if adapter is None:
            return self.submit(
                request_id, prompt, output, external_tokens=external_tokens, hold=hold,
                events=events,
            )  # fmt: skip
        await self.loras.acquire(adapter)
        try:
            salted = self.loras.salted(adapter, prompt)
            gen = self.submit(
                request_id, salted, output, external_tokens=external_tokens, hold=hold,
                events=events,
            )  # fmt: skip
        except BaseException:
            self.loras.release(adapter)
            raise
        gen.adapter = adapter
        return gen

    def abort(self, request_id: str) -> None:
        gen = self._live.pop(request_id, None)
        if gen is not None:
            self.engine.abort(request_id)
            if gen.adapter is not None:
                self.loras.release(gen.adapter)

    def release(self, request_id: str) -> None:
        """Free the blocks a finished `hold` request keeps (no-op if it keeps none)."""
        if self.engine.release(request_id):
            self._wakeup.set()  # waiting requests may fit now

    def cached_prefix_blocks(self, prompt: Sequence[int], adapter: str | None = None) -> int:
        """How many of the prompt's leading full blocks the prefix cache holds."""
        tokens = prompt if adapter is None else self.loras.salted(adapter, prompt)
        return self.engine.cached_prefix_blocks(tokens)

    def cached_block_hashes(self) -> list[int]:
        """The hashes of the blocks the prefix cache holds, as KV events carry them."""
        return sorted(map(external_hash, self.engine.kv_cache.cached_hashes()))

    async def reset_prefix_cache(self) -> bool:
        """vLLM's `/reset_prefix_cache`: False while requests hold blocks."""
        done = self.engine.reset_prefix_cache()
        await self._publish_kv_events()
        return done

    async def _publish_kv_events(self) -> None:
        events = self.engine.take_kv_events()
        if events and self.on_kv_events is not None:
            await self.on_kv_events(events)

    def _stats_with_held(self) -> EngineStats:
        # Requests waiting for an adapter slot wait in vLLM's queue too.
        stats = self.engine.stats()
        return replace(stats, waiting=stats.waiting + self.loras.held)

    async def run(self) -> None:
        """The engine loop; runs until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            if not self.engine.has_work():
                self._wakeup.clear()
                await self._wakeup.wait()
            started = loop.time()
            result = self.engine.step()
            if result.idle:  # the waiting requests need blocks that held requests keep
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await asyncio.sleep(max(0.0, started + result.duration_s / self.speedup - loop.time()))
            await self._publish_kv_events()  # at the end of the step, as vLLM does
            now = loop.time()
            for adm in result.admitted:
                gen = self._live.get(adm.request_id)
                if gen is not None and not adm.resumed:
                    # vLLM counts transferred tokens as cached (num_cached_tokens).
                    gen.cached_tokens = adm.cached_tokens + adm.external_tokens
            for ev in result.tokens:
                self._deliver(ev, now)

    def _deliver(self, ev: TokenEvent, now: float) -> None:
        gen = self._live.get(ev.request_id)
        if gen is None:
            return  # aborted while the step ran
        if gen.first_token_at is None:
            gen.first_token_at = now
            self.metrics.ttft.observe(now - gen.arrival)
        elif gen.last_token_at is not None:
            self.metrics.itl.observe(now - gen.last_token_at)
        gen.last_token_at = now
        gen.events.put_nowait(ev)
        if ev.finished:
            self.metrics.e2e.observe(now - gen.arrival)
            gen.events.put_nowait(None)
            del self._live[ev.request_id]
            if gen.adapter is not None:
                self.loras.release(gen.adapter)
