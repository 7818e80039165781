"""Request-by-request fingerprints of a replay, to compare two engines (or a run with a golden).

A fingerprint holds, per request id: the replica it was routed to and the virtual times of
its decision, first token and last token; per replica: the engine's counters, its free
queue (eviction order) and its cached hashes at the end; and, when the engines record
KV-cache events, every event in the order each engine made it. Times are kept as exact
floats (`float.hex`), so two fingerprints are equal only if every figure is bit-identical.
"""

from __future__ import annotations

import hashlib
import lzma
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from routing.kv_events import KvEvent
from routing.traces import TraceRequest, load_trace
from routing.types import Decision, EndpointSnapshot, EngineMetrics, RoutingRequest
from sim.engine.model import EngineModel
from sim.engine.profiles import get_profile
from sim.engine.types import EngineProfile
from sim.replay import Replay, SimSettings
from sim.replay.cli import fit_profile, with_block_size

SLICE = Path(__file__).resolve().parents[3] / "fixtures" / "mooncake" / "conversation_1500.jsonl.xz"


def mooncake_slice(tmp: Path, limit: int | None = None) -> list[TraceRequest]:
    """The first requests (all 1,500, or `limit`) of the Mooncake conversation trace."""
    path = tmp / "conversation_1500.jsonl"
    path.write_bytes(lzma.decompress(SLICE.read_bytes()))
    return load_trace(path, "mooncake", limit)


def h100(trace: Sequence[TraceRequest], num_blocks: int | None = None) -> EngineProfile:
    """The default profile in 16-token blocks (fitted to the trace), optionally smaller."""
    profile, _ = with_block_size(get_profile("h100-llama3-8b"), 16)
    if num_blocks is not None:
        profile = replace(profile, config=replace(profile.config, num_blocks=num_blocks))
    return fit_profile(profile, trace)[0]


@dataclass
class _Recorder:
    """A `ReplayObserver` that keeps each request's route and times."""

    requests: dict[str, list[object]] = field(default_factory=dict)

    def decided(
        self,
        now: float,
        request: RoutingRequest,
        snapshots: Sequence[EndpointSnapshot],
        scraped: Sequence[EngineMetrics | None],
        decision: Decision,
    ) -> None:
        self.requests[request.request_id] = [decision.target, now.hex()]

    def first_token(self, now: float, request_id: str) -> None:
        self.requests[request_id].append(now.hex())

    def finished(self, now: float, request_id: str) -> None:
        self.requests[request_id].append(now.hex())


_STATS = ("prefix_queries", "prefix_hits", "preemptions", "prompt_tokens", "generation_tokens")


def _event(event: KvEvent) -> tuple[object, ...]:
    """An event as plain values: its kind, hashes, parent and token count."""
    hashes = getattr(event, "block_hashes", ())
    tokens = len(getattr(event, "token_ids", ()))
    return (type(event).__name__, tuple(hashes), getattr(event, "parent_block_hash", None), tokens)


def _tap_events(engine: EngineModel, sink: list[KvEvent]) -> None:
    take = engine.take_kv_events

    def tapped() -> list[KvEvent]:
        events = take()
        sink.extend(events)
        return events

    engine.take_kv_events = tapped  # type: ignore[method-assign]


def fingerprint(
    trace: Sequence[TraceRequest],
    policy: str,
    profile: EngineProfile,
    settings: SimSettings,
) -> dict[str, object]:
    """Everything a replay decided and every engine ended with (see the module docstring)."""
    recorder = _Recorder()
    replay = Replay(trace, policy, profile, settings, observer=recorder)
    events: list[list[KvEvent]] = [[] for _ in replay.replicas]
    for replica, sink in zip(replay.replicas, events, strict=True):
        _tap_events(replica.engine, sink)
    result = replay.run()
    engines = []
    for replica, sink in zip(replay.replicas, events, strict=True):
        kv = replica.engine.kv_cache
        stats = replica.engine.stats()
        engines.append(
            {
                "stats": [getattr(stats, name) for name in _STATS],
                "eviction_order": kv.eviction_order(),
                "cached": sorted(kv.cached_hashes()),
                "events": [_event(e) for e in sink],
            }
        )
    return {
        "requests": recorder.requests,
        "log": [list(map(float.hex, a)) for a in (result.log.ttft_s, result.log.e2e_s)],
        "segments": (result.segments, result.steps, result.rejected),
        "engines": engines,
    }


def digest(print_: dict[str, object]) -> str:
    """A short stable digest of a fingerprint (for golden values)."""
    return hashlib.sha256(repr(print_).encode()).hexdigest()[:16]
