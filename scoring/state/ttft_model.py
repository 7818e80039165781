"""Per-endpoint linear TTFT model, learned online: ttft ≈ overhead_s + prefill_token_s × work.

`work` is the prefill a request waits for: its own uncached prompt tokens plus the uncached
tokens of requests sent to the same endpoint earlier and still waiting for their first token.
Each endpoint's line is fitted by exponentially weighted least squares (decay per sample),
so it follows an engine whose speed drifts; until an endpoint has `min_samples` samples
with enough spread in `work`, it borrows the mean of the lines fitted for the other
endpoints (replicas of a pool are alike; a generic prior against a fitted neighbour would
make whichever looks faster attract every request), and the configured prior while no
endpoint has one. A learned coefficient stays
within `bound`× of the prior's (default 10× either way): a confounded fit — TTFTs dominated
by queueing the model does not see — must not make a replica look free and attract every
request. Pure: the gateway (or the simulator) feeds observations in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat


@dataclass(frozen=True, slots=True)
class TtftCoefficients:
    overhead_s: float
    prefill_token_s: float

    def predict(self, work_tokens: float) -> float:
        return self.overhead_s + self.prefill_token_s * work_tokens


@dataclass(slots=True)
class _Sums:
    n: int = 0
    w: float = 0.0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    xy: float = 0.0


class OnlineTtftModel:
    """Exponentially weighted least-squares fit of TTFT against prefill work, per endpoint."""

    def __init__(
        self,
        prior: TtftCoefficients,
        decay: float = 0.98,
        min_samples: int = 8,
        bound: float = 10.0,
    ):
        if not 0.0 < decay <= 1.0:
            raise ValueError("decay must be in (0, 1]")
        if bound < 1.0:
            raise ValueError("bound must be >= 1")
        self.prior = prior
        self._bound = bound
        self._decay = decay
        self._min_samples = min_samples
        self._sums: dict[str, _Sums] = {}
        self._fit: dict[str, TtftCoefficients] = {}
        self._fallback = prior  # for endpoints without a fit of their own

    def observe(self, endpoint: str, work_tokens: float, ttft_s: float) -> None:
        if ttft_s < 0 or work_tokens < 0:
            return
        s = self._sums.setdefault(endpoint, _Sums())
        d = self._decay
        s.n += 1
        s.w = s.w * d + 1.0
        s.x = s.x * d + work_tokens
        s.y = s.y * d + ttft_s
        s.xx = s.xx * d + work_tokens * work_tokens
        s.xy = s.xy * d + work_tokens * ttft_s
        fit = self._solve(s)
        if fit is not None:
            self._fit[endpoint] = fit
            self._refresh_fallback()

    def _refresh_fallback(self) -> None:
        fits = self._fit.values()
        n = len(fits)
        self._fallback = (
            TtftCoefficients(
                sum(f.overhead_s for f in fits) / n, sum(f.prefill_token_s for f in fits) / n
            )
            if n
            else self.prior
        )

    def _solve(self, s: _Sums) -> TtftCoefficients | None:
        if s.n < self._min_samples:
            return None
        mean_x, mean_y = s.x / s.w, s.y / s.w
        var_x = s.xx / s.w - mean_x * mean_x
        if var_x <= (0.05 * mean_x) ** 2 + 1.0:  # no spread in work: slope unidentifiable
            return None
        slope = self._clamp((s.xy / s.w - mean_x * mean_y) / var_x, self.prior.prefill_token_s)
        overhead = self._clamp(mean_y - slope * mean_x, self.prior.overhead_s)
        return TtftCoefficients(overhead, slope)

    def _clamp(self, value: float, prior: float) -> float:
        return min(max(value, prior / self._bound), prior * self._bound)

    def coefficients(self, endpoint: str) -> TtftCoefficients:
        return self._fit.get(endpoint, self._fallback)

    def lines(self, endpoints: Iterable[str]) -> list[TtftCoefficients]:
        """`coefficients` of each endpoint, in order."""
        if type(self).coefficients is not OnlineTtftModel.coefficients:  # a subclass answers
            return [self.coefficients(e) for e in endpoints]
        return list(map(self._fit.get, endpoints, repeat(self._fallback)))

    def forget(self, endpoint: str) -> None:
        self._sums.pop(endpoint, None)
        if self._fit.pop(endpoint, None) is not None:
            self._refresh_fallback()
