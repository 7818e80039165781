"""Engine timing for the replays: a named profile, or one fitted to the TTFTs the gateway saw.

Fitted (`tuning.engine_timing: fitted`): the window's streamed requests, each with its
observed TTFT y and uncached prompt tokens u (the prompt less the leading blocks an earlier
request of the window sent, as if the engines shared one cache), give a least-squares line
y = a + b·u, fitted again twice, each time to the requests at or below the last line (the
least queued: an unloaded TTFT; `envelope`); when a ≤ 0 or b is beyond 20 times the named
profile's b₀ either way (prompts alike), b = b₀ and a is the median of y − b·u. The named
profile's unloaded line: a₀ = step overhead + API-server costs, b₀ = prefill s per token.
Fitted: the named profile with its prefill compute (prefill_token_s, attention_s,
context_attention_s) scaled by b / b₀ and a − a₀ added to each request's latency
(request_overhead_s, which queues nothing) or, when negative, its fixed costs scaled by
a / a₀. Fewer than `min_observations` TTFTs, or a ≤ 0: the named profile, and the note says
why."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from routing.traces import TraceRequest
from sim.engine.types import EngineProfile

RATIO_LIMIT = 20.0


@dataclass(frozen=True, slots=True)
class Timing:
    """The engine timing a window's replays used, and how it was obtained."""

    engine: EngineProfile
    source: str  # "named" | "fitted"
    observations: int  # requests with an observed TTFT in the window
    intercept_s: float | None = None  # the fitted line (None when not fitted)
    slope_s: float | None = None  # seconds per uncached prompt token
    added_s: float = 0.0  # a - a0 when positive: added to each request's latency
    fixed_ratio: float = 1.0  # a / a0 when below 1: the named profile's fixed costs scaled
    prefill_ratio: float = 1.0  # b / b0: its prefill compute scaled by this
    note: str = ""

    def describe(self) -> str:
        if self.intercept_s is None or self.slope_s is None:
            tail = f" ({self.note})" if self.note else ""
            return f"named profile {self.engine.name}{tail}"
        return (
            f"fitted to {self.observations} observed TTFTs: {self.intercept_s * 1e3:.1f} ms + "
            f"{self.slope_s * 1e6:.2f} us per uncached token; {self.engine.name} with prefill "
            f"x{self.prefill_ratio:.2f}, fixed costs x{self.fixed_ratio:.2f} "
            f"+ {self.added_s * 1e3:.1f} ms per request"
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        t = self.engine.timing
        return {
            "source": self.source,
            "profile": self.engine.name,
            "observations": self.observations,
            "intercept_s": self.intercept_s,
            "slope_s_per_token": self.slope_s,
            "added_s": round(self.added_s, 6),
            "fixed_ratio": round(self.fixed_ratio, 4),
            "prefill_ratio": round(self.prefill_ratio, 4),
            "overhead_s": t.overhead_s,
            "prefill_token_s": t.prefill_token_s,
            "note": self.note,
        }


def uncached_tokens(trace: Sequence[TraceRequest]) -> list[int]:
    """Per request: prompt tokens after the leading blocks an earlier request sent."""
    seen: set[int] = set()
    out = []
    for r in trace:
        cached = 0
        for h in r.hash_ids:
            if h not in seen:
                break
            cached += 1
        seen.update(r.hash_ids)
        out.append(max(0, r.input_tokens - cached * r.block_tokens))
    return out


def line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) of ys on xs; None when the xs are all equal."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - slope * mx, slope


def named_timing(engine: EngineProfile, observations: int = 0, note: str = "") -> Timing:
    return Timing(engine, "named", observations, note=note)


def fit_timing(
    trace: Sequence[TraceRequest], engine: EngineProfile, min_observations: int
) -> Timing:
    """The named `engine` fitted to the window's observed TTFTs (module docstring)."""
    pairs = [(u, r.ttft_s) for u, r in zip(uncached_tokens(trace), trace, strict=True)]
    observed = [(float(u), y) for u, y in pairs if y is not None]
    n = len(observed)
    if n < min_observations:
        return named_timing(engine, n, f"{n} observed TTFTs, fewer than {min_observations}")
    t, fe = engine.timing, engine.frontend
    a, b = envelope(observed) or (0.0, 0.0)
    b0 = t.prefill_token_s
    if a <= 0 or not b0 / RATIO_LIMIT <= b <= b0 * RATIO_LIMIT:  # the named slope, the floor
        b = b0
        a = statistics.median(y - b * u for u, y in observed)
    if a <= 0 or b <= 0:
        return named_timing(engine, n, f"fitted line {a:.4f} s + {b:.2e} s/token not usable")
    a0 = t.overhead_s + fe.frontend_s + fe.request_overhead_s
    fixed = max(1.0 / RATIO_LIMIT, a / a0) if a < a0 else 1.0
    added = max(0.0, a - a0)
    prefill = b / b0
    timing = replace(
        t,
        overhead_s=t.overhead_s * fixed,
        prefill_token_s=t.prefill_token_s * prefill,
        attention_s=t.attention_s * prefill,
        context_attention_s=t.context_attention_s * prefill,
    )
    overhead = fe.request_overhead_s * fixed + added
    frontend = replace(fe, frontend_s=fe.frontend_s * fixed, request_overhead_s=overhead)
    fitted = replace(engine, timing=timing, frontend=frontend)
    return Timing(fitted, "fitted", n, a, b, added, fixed, prefill)


def envelope(points: Sequence[tuple[float, float]], rounds: int = 2) -> tuple[float, float] | None:
    """The least-squares line of the points, fitted again `rounds` times to those at or
    below the last one; None when the xs are all equal."""
    fit = line([u for u, _ in points], [y for _, y in points])
    for _ in range(rounds):
        if fit is None:
            return None
        a, b = fit
        low = [(u, y) for u, y in points if y <= a + b * u]
        if len(low) < 2:
            break
        points = low
        fit = line([u for u, _ in low], [y for _, y in low])
    return fit
