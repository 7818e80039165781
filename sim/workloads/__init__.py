"""Synthetic workloads for live runs, closed loop and open loop, side by side.

- `closed_loop`: `closed_loop_chats`, multi-turn chats whose next turn waits for the answer
  to the previous one (the demo's and the quality benchmark's chats);
- `open_loop`: `open_loop_chats`, the same kind of chats as a trace with an arrival time per
  turn, and `timed_requests`, any trace as HTTP requests sent at its arrival times (the
  fidelity check's chats, the quality benchmark's Mooncake slice);
- `family`: a parameterised family of multi-tenant chats (tenants, prefix length, cache
  pressure, popularity, turns) sent live closed or open loop, or simulated as a trace from
  the same seed (the regime map's workloads).

Pure and seeded; `sim.live.client` sends them.
"""

from sim.workloads.closed_loop import Conversation, closed_loop_chats, synth_text
from sim.workloads.family import Chat, FamilyCell
from sim.workloads.open_loop import TimedRequest, open_loop_chats, text_prompt, timed_requests

__all__ = [
    "Chat",
    "Conversation",
    "FamilyCell",
    "TimedRequest",
    "closed_loop_chats",
    "open_loop_chats",
    "synth_text",
    "text_prompt",
    "timed_requests",
]
