"""Emulated replicas that publish KV-cache events, and what the tests of the precise index
wait for and send: two `kvgate emulate` replicas of model `emu` on free ports with their
publisher and replay sockets (`replicas_with_events`), the gateway's subscribers gone quiet
(`events_settled`), and a tenant's chat turn (`tenant_chat`)."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gateway.app import GatewayApp
from sim.live.processes import ChildProcess, start_emulator
from sim.workloads import synth_text

MODEL = "emu"
Sockets = list[tuple[str, str]]  # each replica's (publisher, replay) endpoint


@contextlib.contextmanager
def replicas_with_events(tmp_path: Path, *extra: str) -> Iterator[tuple[list[str], Sockets]]:
    """Two replicas publishing KV events (`extra`: more `kvgate emulate` options); their
    URLs and sockets, stopped on exit."""
    args = ["--kv-events-port", "0", *extra]
    child: ChildProcess
    child, urls = start_emulator(2, "demo", MODEL, tmp_path / "emu.log", speedup=50, extra=args)
    try:
        found = child.wait_for_line(r"^replica \d+ kv-events: (\S+) replay (\S+)", 2)
        yield urls, [(m.group(1), m.group(2)) for m in found]
    finally:
        child.stop()


def events_settled(app: GatewayApp, quiet_s: float = 0.15) -> None:
    """Wait until no KV-event batch arrived for `quiet_s` (the last answer's events are in)."""
    last, since = -1, time.monotonic()
    while time.monotonic() - since < quiet_s:
        seen = sum(s.counters.batches for s in app.runtime.kv_loops.subscribers.values())
        if seen != last:
            last, since = seen, time.monotonic()
        time.sleep(0.02)


def tenant_chat(tenant: int, turn: int, rng: random.Random, system_words: int) -> dict[str, Any]:
    """Turn `turn` of a chat of `tenant`, whose system prompt (`system_words` long) it shares."""
    system = synth_text(random.Random(tenant), system_words)
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"turn {turn}: " + synth_text(rng, 20)},
        ],
        "max_tokens": 4,
    }
