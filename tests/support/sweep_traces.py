"""Small trace files for `kvgate sim sweep` tests, and what of two sweeps must agree."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

# Wall and CPU seconds of a replay: the only fields that depend on where it ran.
TIMED_FIELDS = frozenset({"sim_seconds", "sim_cpu_seconds"})


def tenant_trace_file(path: Path, n: int = 60, tenants: int = 12) -> Path:
    """A Mooncake-format trace: tenants sharing a 2-block prefix, a block of their own each."""
    rng = random.Random(0)
    lines = []
    for i in range(n):
        tenant = rng.randrange(tenants)
        ids = [2 * tenant, 2 * tenant + 1, 2 * tenants + i]
        row = {"timestamp": 150 * i, "input_length": 1436, "output_length": 8, "hash_ids": ids}
        lines.append(orjson.dumps(row))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def untimed_runs(sweep_json: Path) -> list[dict[str, Any]]:
    """Every run of a sweep.json, best first, without its wall and CPU seconds."""
    runs = orjson.loads(sweep_json.read_bytes())["runs"]
    return [{k: v for k, v in run.items() if k not in TIMED_FIELDS} for run in runs]
