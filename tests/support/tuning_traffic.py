"""Traffic for the self-tuning tests: two emulated `demo` replicas and chats over two
tenants' long system prompts, so that a prefix-aware profile has something to win."""

from __future__ import annotations

import random

import httpx

from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.workloads import synth_text
from tests.support.fixture_types import ServeApp

MODEL = "emu"


def chats(url: str, conversations: int, seed: int) -> list[int]:
    """Chats over two tenants' long system prompts, one request at a time; the statuses."""
    rng = random.Random(seed)
    systems = [f"You answer for tenant {t}. " + synth_text(rng, 600) for t in range(2)]
    statuses = []
    with httpx.Client(base_url=url, timeout=30) as c:
        for n in range(conversations):
            messages = [{"role": "system", "content": systems[n % 2]}]
            for _ in range(3):
                messages.append({"role": "user", "content": synth_text(rng, 30)})
                body = {"model": MODEL, "messages": messages, "max_tokens": 4, "stream": True}
                r = c.post("/v1/chat/completions", json=body, headers={"x-session-id": f"c{n}"})
                statuses.append(r.status_code)
                messages.append({"role": "assistant", "content": "ok"})
    return statuses


def emulated_fleet(serve_app: ServeApp) -> list[str]:
    """Two emulated `demo` replicas of `MODEL` (10× speed), their URLs."""
    profile = get_profile("demo")
    return [
        serve_app(
            EmulatorApp(Replica(profile, MODEL, speedup=10.0), BuiltinTokenizer()), lifespan="on"
        ).url
        for _ in range(2)
    ]
