"""kvgate's lab: benchmarks, the engine model's calibration and the simulator's fidelity check.

Not part of what users install (pyproject's package list leaves `bench` out): run it from a
checkout, at the repository's root, as `python -m bench SUBCOMMAND` (see `bench.__main__`).
It builds on the installed library: `sim.live` runs the experiments, `sim.workloads` makes
the workloads, `routing.percentile` is the percentile rule.

Where the lab finds things: `REPO_ROOT` is the checkout this package sits in, found from
the package's own location; trace files are looked up in `--traces DIR`, by default
`DEFAULT_TRACES`, the repository's `traces/` (gzip copies; `trace_file` takes a file's
plain or `.gz` name, whichever is there).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACES = REPO_ROOT / "traces"
TRACES_HELP = (
    "directory of the trace files, plain or gzip (default: the repository's traces/, here "
    f"{DEFAULT_TRACES})"
)


def trace_file(directory: str | Path, name: str) -> Path:
    """`directory/name`, or its gzip copy `name.gz` when only that is there."""
    plain = Path(directory) / name
    packed = plain.with_name(name + ".gz")
    return packed if not plain.exists() and packed.exists() else plain
