"""LoRA adapters on an emulated replica: vLLM's adapter slots, kept in front of the engine model.

A replica serves its base model and `LoraSettings.adapters` (`kvgate emulate --lora NAME ...`),
batching at most `max_loras` distinct adapters at a time, as vLLM:

- an adapter holds one of `max_loras` slots while any of its requests is loading or in the
  engine model; a request whose adapter has no slot waits (vLLM: "deferred") and counts in
  `vllm:num_requests_waiting`;
- an adapter not among the `max_loras` most recently used costs `load_s` (modelled seconds,
  divided by the speedup) when it takes a slot, before its requests enter the engine model;
- an adapter request's prompt is keyed apart in the prefix cache (vLLM's block hashes carry
  the adapter's name), so it hits only blocks computed for the same adapter.

Otherwise an adapter request costs what a base-model request costs. `vllm:lora_requests_info`
lists as running the adapters with requests in the engine model, as waiting the others in use.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

# Prompt token ids of adapter i (from 0) are offset by (i + 1) << _SALT_SHIFT: far above any
# vocabulary, so no adapter's block can equal the base model's or another adapter's.
_SALT_SHIFT = 40


def unsalted(tokens: Sequence[int]) -> tuple[int | None, list[int]]:
    """(the adapter's LoRA id, from 1, or None for the base model; the unsalted token ids)
    of tokens as `LoraSlots.salted` keyed them."""
    lora_id = tokens[0] >> _SALT_SHIFT if tokens else 0
    if not lora_id:
        return None, list(tokens)
    mask = (1 << _SALT_SHIFT) - 1
    return lora_id, [t & mask for t in tokens]


@dataclass(frozen=True, slots=True)
class LoraSettings:
    """The adapters a replica serves and vLLM's limits on them."""

    adapters: tuple[str, ...] = ()
    max_loras: int = 1  # vLLM's --max-loras default
    load_s: float = 0.05  # loading an adapter that is not resident

    def __post_init__(self) -> None:
        if self.max_loras < 1 or self.load_s < 0:
            raise ValueError("max_loras must be >= 1 and load_s >= 0")
        if len(set(self.adapters)) != len(self.adapters):
            raise ValueError(f"duplicate LoRA adapter names in {list(self.adapters)}")


class LoraSlots:
    """One replica's adapter slots (see the module docstring). Lives on the event loop."""

    def __init__(self, settings: LoraSettings, speedup: float = 1.0) -> None:
        self.settings = settings
        self._load_s = settings.load_s / speedup
        self._salts = {name: (i + 1) << _SALT_SHIFT for i, name in enumerate(settings.adapters)}
        self._slots: Counter[str] = Counter()  # adapter → requests loading or in the engine
        self._running: Counter[str] = Counter()  # adapter → requests in the engine
        self._waiting: Counter[str] = Counter()  # adapter → requests waiting for slot or load
        self._ready_at: OrderedDict[str, float] = OrderedDict()  # resident adapters, LRU first
        self._freed = asyncio.Event()

    def serves(self, adapter: str) -> bool:
        return adapter in self._salts

    @property
    def held(self) -> int:
        """Requests waiting for a slot or a load, not yet in the engine model."""
        return self._waiting.total()

    def running(self) -> list[str]:
        return [a for a in self.settings.adapters if self._running[a]]

    def waiting(self) -> list[str]:
        return [a for a in self.settings.adapters if self._waiting[a]]

    def resident(self) -> list[str]:
        """Adapters loaded or loading, least recently used first."""
        return list(self._ready_at)

    def salted(self, adapter: str, prompt: Sequence[int]) -> list[int]:
        """`prompt` as the engine model's prefix cache should key it for `adapter`."""
        salt = self._salts[adapter]
        return [t + salt for t in prompt]

    async def acquire(self, adapter: str) -> None:
        """Wait for a slot for `adapter` and for its load; then one request of it may enter
        the engine model, and must `release` it when it leaves."""
        self._waiting[adapter] += 1
        try:
            while adapter not in self._slots and len(self._slots) >= self.settings.max_loras:
                await self._freed.wait()
            self._slots[adapter] += 1
            try:
                loop = asyncio.get_running_loop()
                delay = self._ready(adapter, loop.time()) - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            except BaseException:
                self._leave(adapter)
                raise
        finally:
            self._waiting[adapter] -= 1
            if not self._waiting[adapter]:
                del self._waiting[adapter]
        self._running[adapter] += 1

    def release(self, adapter: str) -> None:
        """One request of `adapter` left the engine model (finished or aborted)."""
        self._running[adapter] -= 1
        if not self._running[adapter]:
            del self._running[adapter]
        self._leave(adapter)

    def _leave(self, adapter: str) -> None:
        self._slots[adapter] -= 1
        if not self._slots[adapter]:
            del self._slots[adapter]
            self._freed.set()  # wake every waiter; those that find no slot wait again
            self._freed = asyncio.Event()

    def _ready(self, adapter: str, now: float) -> float:
        """When `adapter` is loaded: now + the load time unless it is resident (an LRU of
        `max_loras` adapters; one without a slot makes room)."""
        ready = self._ready_at.get(adapter)
        if ready is None:
            if len(self._ready_at) >= self.settings.max_loras:
                idle = next(a for a in self._ready_at if a not in self._slots)
                del self._ready_at[idle]
            ready = self._ready_at[adapter] = now + self._load_s
        self._ready_at.move_to_end(adapter)
        return ready
