"""Closed-loop chats: seeded, tenants sharing system prompts, Poisson starts."""

from __future__ import annotations

from sim.workloads import closed_loop_chats


def test_chats_are_seeded_and_share_their_tenants_system_prompts() -> None:
    chats = closed_loop_chats(seed=5, tenants=3, conversations=12, turns=2)
    assert chats == closed_loop_chats(seed=5, tenants=3, conversations=12, turns=2)
    assert len(chats) == 12 and all(len(c.user_turns) == 2 for c in chats)
    prompts = {c.tenant: c.system_prompt for c in chats}
    assert all(c.system_prompt == prompts[c.tenant] for c in chats)
    assert len(set(prompts.values())) == len(prompts) <= 3
    starts = [c.start_s for c in chats]
    assert starts[0] == 0.0 and starts == sorted(starts)
