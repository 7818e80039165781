"""The chaos suite's figures: per case its outcome and what it measured, as a table and JSON.

Cases record values with `ChaosFigures.record`; the conftest adds each case's outcome and the
gateway's memory and descriptor growth, and at the end of the session prints the table and
writes ``out/chaos/chaos.json`` (and ``chaos.png``, p99 per fault, if matplotlib
is installed). The summary block answers the issue's questions (requests lost before
streaming, error events for those cut while streaming, p99 per fault against the baseline,
RSS and fd growth, time to eject and readmit, shed fraction).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.plots import PlotsUnavailable, pyplot

Value = float | int | str | bool | None


@dataclass(slots=True)
class CaseFigures:
    """One case: ``outcome`` (passed/failed/error) and its named values."""

    outcome: str = "not run"
    values: dict[str, Value] = field(default_factory=dict)
    failure: str = ""


@dataclass(slots=True)
class ChaosFigures:
    """Everything the session measured, by case name (test name without ``test_``)."""

    cases: dict[str, CaseFigures] = field(default_factory=dict)

    def case(self, name: str) -> CaseFigures:
        return self.cases.setdefault(name, CaseFigures())

    def record(self, name: str, **values: Value) -> None:
        self.case(name).values.update(values)

    def summary(self) -> dict[str, Value]:
        """The issue's headline figures, gathered from the cases that measured them."""
        out: dict[str, Value] = {}
        lost = [
            v for c in self.cases.values() if (v := c.values.get("lost_not_started")) is not None
        ]
        out["requests lost that had not started streaming (target 0)"] = _total(lost)
        ok = _total([c.values.get("sse_error_events_ok") for c in self.cases.values()])
        cut = _total([c.values.get("streams_cut") for c in self.cases.values()])
        out["well-formed SSE error events / streams cut after starting"] = (
            f"{ok}/{cut}" if cut is not None else None
        )
        for name, case in sorted(self.cases.items()):
            if "p99_fault_s" in case.values:
                base, fault = case.values.get("p99_baseline_s"), case.values["p99_fault_s"]
                out[f"p99 latency, {name}: baseline -> during fault (s)"] = f"{base} -> {fault}"
        out["gateway RSS growth, max over cases (MB)"] = _max("rss_growth_mb", self.cases)
        out["gateway open-fd growth, max over cases"] = _max("fd_growth", self.cases)
        for key in ("eject_s", "readmit_s", "shed_fraction"):
            found = [c.values[key] for c in self.cases.values() if key in c.values]
            out[_LABELS[key]] = found[0] if found else None
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "cases": {
                name: {"outcome": c.outcome, "failure": c.failure, **c.values}
                for name, c in sorted(self.cases.items())
            },
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    def table(self) -> str:
        """The cases (outcome and values) and the summary, as plain text."""
        width = max((len(n) for n in self.cases), default=10) + 2
        lines = [f"{'case':<{width}}{'result':<8}figures", "-" * (width + 60)]
        for name, case in sorted(self.cases.items()):
            shown = " ".join(f"{k}={v}" for k, v in case.values.items())
            lines.append(f"{name:<{width}}{case.outcome.upper():<8}{shown}")
            if case.failure:
                lines.append(f"{'':<{width + 8}}! {case.failure[:150]}")
        passed = sum(c.outcome == "passed" for c in self.cases.values())
        lines += ["", f"{passed}/{len(self.cases)} cases passed", ""]
        lines += [f"{label}: {value}" for label, value in self.summary().items()]
        return "\n".join(lines)


_LABELS = {
    "eject_s": "time to eject a SIGKILLed backend (s)",
    "readmit_s": "time to readmit it after restart (s)",
    "shed_fraction": "shed fraction in the 10x burst",
}


def _total(values: list[Value]) -> int | None:
    numbers = [int(v) for v in values if isinstance(v, int | float)]
    return sum(numbers) if numbers else None


def _max(key: str, cases: dict[str, CaseFigures]) -> Value:
    numbers = [v for c in cases.values() if isinstance(v := c.values.get(key), int | float)]
    return max(numbers) if numbers else None


def plot_latency(figures: ChaosFigures, path: Path) -> bool:
    """p99 latency per fault against its baseline, as a bar chart; False without matplotlib."""
    try:
        plt = pyplot()
    except PlotsUnavailable:
        return False
    rows = [
        (name, c.values["p99_baseline_s"], c.values["p99_fault_s"])
        for name, c in sorted(figures.cases.items())
        if isinstance(c.values.get("p99_baseline_s"), float)
        and isinstance(c.values.get("p99_fault_s"), float)
    ]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r[1] for r in rows], 0.4, label="baseline")
    ax.bar([x + 0.2 for x in xs], [r[2] for r in rows], 0.4, label="during the fault")
    ax.set_xticks(list(xs), [r[0].replace("_", " ") for r in rows], fontsize=8)
    ax.set_ylabel("p99 latency (s)")
    ax.set_title("kvgate chaos suite: p99 during each fault")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
