"""LoRA adapter slots of an emulated replica: vLLM's `max_loras` budget and adapter loads."""

from __future__ import annotations

import asyncio

import pytest

from sim.emulator.lora import LoraSettings, LoraSlots


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_settings_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        LoraSettings(("a", "a"))
    with pytest.raises(ValueError, match="max_loras"):
        LoraSettings(("a",), max_loras=0)


async def test_an_adapter_without_a_slot_waits_for_one() -> None:
    slots = LoraSlots(LoraSettings(("a", "b"), max_loras=1, load_s=0.0))
    await slots.acquire("a")
    await slots.acquire("a")  # the same adapter shares its slot
    b = asyncio.create_task(slots.acquire("b"))
    await _settle()
    assert not b.done()
    assert (slots.running(), slots.waiting(), slots.held) == (["a"], ["b"], 1)
    slots.release("a")
    await _settle()
    assert not b.done()  # a still has a request in the engine
    slots.release("a")
    await b
    assert (slots.running(), slots.waiting(), slots.held) == (["b"], [], 0)


async def test_a_load_counts_as_waiting_and_a_cancelled_wait_frees_the_slot() -> None:
    slots = LoraSlots(LoraSettings(("a", "b"), max_loras=1, load_s=1e6))
    a = asyncio.create_task(slots.acquire("a"))
    await _settle()
    assert (slots.running(), slots.waiting()) == ([], ["a"])
    b = asyncio.create_task(slots.acquire("b"))
    await _settle()
    a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a
    await _settle()
    assert (slots.running(), slots.waiting(), slots.resident()) == ([], ["b"], ["b"])
    b.cancel()
    with pytest.raises(asyncio.CancelledError):
        await b
    assert slots.held == 0


async def test_the_least_recently_used_idle_adapter_is_unloaded() -> None:
    slots = LoraSlots(LoraSettings(("a", "b", "c"), max_loras=2, load_s=0.0))
    for name in ("a", "b"):
        await slots.acquire(name)
    slots.release("b")
    slots.release("a")
    await slots.acquire("b")  # b becomes the most recently used
    slots.release("b")
    assert slots.resident() == ["a", "b"]
    await slots.acquire("c")
    assert slots.resident() == ["b", "c"]
    await slots.acquire("b")  # a resident adapter takes a free slot
    assert slots.running() == ["b", "c"]


def test_adapter_prompts_are_keyed_apart() -> None:
    slots = LoraSlots(LoraSettings(("a", "b")))
    prompt = [1, 2, 3]
    assert slots.salted("a", prompt) != prompt
    assert slots.salted("a", prompt) != slots.salted("b", prompt)
    assert slots.salted("a", prompt) == slots.salted("a", prompt)
    assert (slots.serves("a"), slots.serves("z")) == (True, False)
