"""Engine timing for the replays: a named profile, or one fitted to the TTFTs the gateway saw.

Fitted (`tuning.engine_timing: fitted`): the window's streamed requests, each with its
observed TTFT y and its uncached prompt tokens u (the prompt less the leading blocks an
earlier request of the window already sent, as if every engine shared one cache), give a
least-squares line y = a + b·u. The named profile draws its own line: a₀ = step overhead +
API-server costs, b₀ = prefill seconds per token. The fitted profile is the named one with
its fixed costs (overhead_s, frontend_s, request_overhead_s) scaled by a / a₀ and its
prefill compute (prefill_token_s, attention_s, context_attention_s) by b / b₀, each ratio
clamped to [1/20, 20]. Fewer than `min_observations` TTFTs, prompts all alike, or a line
with a ≤ 0 or b ≤ 0: the named profile, and the note says why.
"""

from __future__ import annotations

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
    fixed_ratio: float = 1.0  # a / a0: the named profile's fixed costs scaled by this
    prefill_ratio: float = 1.0  # b / b0: its prefill compute scaled by this
    note: str = ""

    def describe(self) -> str:
        if self.intercept_s is None or self.slope_s is None:
            tail = f" ({self.note})" if self.note else ""
            return f"named profile {self.engine.name}{tail}"
        return (
            f"fitted to {self.observations} observed TTFTs: {self.intercept_s * 1e3:.1f} ms + "
            f"{self.slope_s * 1e6:.2f} us per uncached token; {self.engine.name} with fixed "
            f"costs x{self.fixed_ratio:.2f}, prefill x{self.prefill_ratio:.2f}"
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        t = self.engine.timing
        return {
            "source": self.source,
            "profile": self.engine.name,
            "observations": self.observations,
            "intercept_s": self.intercept_s,
            "slope_s_per_token": self.slope_s,
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
    fit = line([u for u, _ in observed], [y for _, y in observed])
    if fit is None:
        return named_timing(engine, n, "every prompt had as many uncached tokens")
    a, b = fit
    if a <= 0 or b <= 0:
        return named_timing(engine, n, f"fitted line {a:.4f} s + {b:.2e} s/token not usable")
    t, fe = engine.timing, engine.frontend
    fixed = _clamp(a / (t.overhead_s + fe.frontend_s + fe.request_overhead_s))
    prefill = _clamp(b / t.prefill_token_s) if t.prefill_token_s > 0 else 1.0
    timing = replace(
        t,
        overhead_s=t.overhead_s * fixed,
        prefill_token_s=t.prefill_token_s * prefill,
        attention_s=t.attention_s * prefill,
        context_attention_s=t.context_attention_s * prefill,
    )
    frontend = replace(
        fe, frontend_s=fe.frontend_s * fixed, request_overhead_s=fe.request_overhead_s * fixed
    )
    fitted = replace(engine, timing=timing, frontend=frontend)
    return Timing(fitted, "fitted", n, a, b, fixed, prefill)


def _clamp(ratio: float) -> float:
    return min(RATIO_LIMIT, max(1.0 / RATIO_LIMIT, ratio))
