"""A prefill replica's handoffs: held blocks, leases, transfers (an engine loop as a task)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from sim.emulator.disagg.handoffs import Handoffs
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile

SPEEDUP = 1000.0
PROMPT = list(range(1000, 1040))  # 40 tokens: 3 blocks of 16


@pytest.fixture
async def replica() -> AsyncIterator[Replica]:
    replica = Replica(get_profile("demo"), "emu", speedup=SPEEDUP)
    loop_task = asyncio.create_task(replica.run())
    yield replica
    loop_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop_task


async def _prefill(replica: Replica, request_id: str) -> None:
    gen = replica.submit(request_id, PROMPT, [7], hold=True)
    while await gen.events.get() is not None:
        pass


async def test_a_transfer_holds_the_blocks_until_it_ends(replica: Replica) -> None:
    handoffs = Handoffs(replica, lease_s=30.0)
    await _prefill(replica, "p-1")
    handoff = handoffs.open("p-1")
    handoffs.prefilled(handoff, "p-1", len(PROMPT))
    assert len(handoff.block_ids) == 3 and replica.engine.stats().held_blocks == 3
    assert handoffs.held() == [{"key": "p-1", "prompt_tokens": 40, "blocks": 3}]
    seconds = await handoffs.transfer(handoff, blocks=2)
    link = replica.profile.transfer
    assert seconds == pytest.approx(
        link.latency_s + 2 * 16 * link.bytes_per_token / link.bandwidth_bytes_s
    )
    assert handoff.outcome == "transferred" and handoff.done.is_set()
    assert replica.engine.stats().held_blocks == 0
    assert handoffs.get("p-1") is None and handoffs.held() == []


async def test_an_unread_handoff_expires_after_its_lease(replica: Replica) -> None:
    handoffs = Handoffs(replica, lease_s=20.0)  # 20 ms at the speedup
    await _prefill(replica, "p-2")
    handoff = handoffs.open("p-2")
    handoffs.prefilled(handoff, "p-2", len(PROMPT))
    await asyncio.wait_for(handoff.done.wait(), 5.0)
    assert handoff.outcome == "expired"
    assert replica.engine.stats().held_blocks == 0 and handoffs.get("p-2") is None
    # The blocks stay cached, as a finished request's do.
    assert replica.cached_prefix_blocks(PROMPT) == 2


async def test_a_room_waits_for_decode_under_the_lease_then_not(replica: Replica) -> None:
    handoffs = Handoffs(replica, lease_s=20.0)
    room = handoffs.open("42")
    assert handoffs.pending() == ["42"]
    handoffs.join(room)  # D joined: no lease while P prefills
    await asyncio.sleep(0.05)
    assert not room.outcome and room.joined.is_set()
    lonely = handoffs.open("43")
    await asyncio.wait_for(lonely.done.wait(), 5.0)
    assert lonely.outcome == "expired" and lonely.joined.is_set()
    assert handoffs.pending() == ["42"]


async def test_a_room_given_up_while_prefilling_frees_the_prefill_at_once(
    replica: Replica,
) -> None:
    handoffs = Handoffs(replica, lease_s=30.0)
    room = handoffs.open("7")
    handoffs.join(room)
    handoffs.fail(room)  # D left
    await _prefill(replica, "p-3")
    handoffs.prefilled(room, "p-3", len(PROMPT))
    assert room.outcome == "failed" and replica.engine.stats().held_blocks == 0
    handoffs.close_all()
