"""Measured against predicted, cell by cell: the comparisons and their summaries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.calibrate.errors import ErrorSummary, relative_error
from bench.calibrate.grid import Cell
from routing.percentile import percentile


@dataclass(frozen=True, slots=True)
class CellComparison:
    """TTFT and mean ITL by rank of first token within a burst, measured and predicted (each
    the median over repetitions)."""

    cell: Cell
    held_back: bool
    measured_ttft_s: tuple[float, ...]
    predicted_ttft_s: tuple[float, ...]
    measured_itl_s: tuple[float, ...]
    predicted_itl_s: tuple[float, ...]
    # Burst means as vLLM's histograms time them (engine core), median over repetitions:
    # one value each, or none when the server's histograms were not read.
    measured_engine_ttft_s: tuple[float, ...] = ()
    predicted_engine_ttft_s: tuple[float, ...] = ()
    measured_engine_itl_s: tuple[float, ...] = ()
    predicted_engine_itl_s: tuple[float, ...] = ()

    def ttft_errors(self) -> list[float]:
        return _errors(self.predicted_ttft_s, self.measured_ttft_s)

    def itl_errors(self) -> list[float]:
        return _errors(self.predicted_itl_s, self.measured_itl_s)

    def engine_ttft_errors(self) -> list[float]:
        return _errors(self.predicted_engine_ttft_s, self.measured_engine_ttft_s)

    def engine_itl_errors(self) -> list[float]:
        return _errors(self.predicted_engine_itl_s, self.measured_engine_itl_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell.key,
            "held_back": self.held_back,
            "measured_ttft_s": list(self.measured_ttft_s),
            "predicted_ttft_s": list(self.predicted_ttft_s),
            "measured_itl_s": list(self.measured_itl_s),
            "predicted_itl_s": list(self.predicted_itl_s),
            "ttft_error": ErrorSummary.of(self.ttft_errors()).to_json(),
            "itl_error": ErrorSummary.of(self.itl_errors()).to_json(),
            "measured_engine_ttft_s": list(self.measured_engine_ttft_s),
            "predicted_engine_ttft_s": list(self.predicted_engine_ttft_s),
            "measured_engine_itl_s": list(self.measured_engine_itl_s),
            "predicted_engine_itl_s": list(self.predicted_engine_itl_s),
        }


def _errors(predicted: tuple[float, ...], measured: tuple[float, ...]) -> list[float]:
    return [relative_error(p, m) for p, m in zip(predicted, measured, strict=False) if m > 0]


def summarize(comparisons: list[CellComparison]) -> dict[str, ErrorSummary]:
    """Error summaries: client side over every request (rank) of the given cells; engine
    side over the cells' burst means."""
    return {
        "ttft": ErrorSummary.of([e for c in comparisons for e in c.ttft_errors()]),
        "itl": ErrorSummary.of([e for c in comparisons for e in c.itl_errors()]),
        "engine_ttft": ErrorSummary.of([e for c in comparisons for e in c.engine_ttft_errors()]),
        "engine_itl": ErrorSummary.of([e for c in comparisons for e in c.engine_itl_errors()]),
    }


def table(comparisons: list[CellComparison]) -> str:
    """A fixed-width table: one line per cell, medians of measured/predicted and |error|."""
    head = (
        f"{'cell':<26}{'set':>6}{'TTFT meas':>11}{'pred':>9}{'|err|':>7}"
        f"{'ITL meas':>10}{'pred':>9}{'|err|':>7}"
    )
    lines = [head, "-" * len(head)]
    for c in sorted(
        comparisons, key=lambda c: (c.cell.concurrency, c.cell.prompt_len, c.cell.hit_fraction)
    ):
        t = ErrorSummary.of(c.ttft_errors())
        i = ErrorSummary.of(c.itl_errors())
        lines.append(
            f"{c.cell.key:<26}{'test' if c.held_back else 'train':>6}"
            f"{_ms(c.measured_ttft_s):>11}{_ms(c.predicted_ttft_s):>9}{t.median_abs:>7.0%}"
            f"{_ms(c.measured_itl_s):>10}{_ms(c.predicted_itl_s):>9}{i.median_abs:>7.0%}"
        )
    return "\n".join(lines)


def _ms(values: tuple[float, ...]) -> str:
    if not values:
        return "-"
    return f"{percentile(values, 50) * 1e3:.1f}ms"
