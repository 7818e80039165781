"""Without matplotlib (no `kvgate[plots]`), kvgate sim, sim sweep and the demo still write
their JSON and say in one line that plots were skipped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from sim.plots import PLOTS_SKIPPED

# sys.modules[name] = None makes `import name` raise ImportError, as if it were not installed.
WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None
from pathlib import Path
from kvgate.cli import main
from sim.demo import write_outputs
from sim.plots import PlotsUnavailable, pyplot

trace, out = sys.argv[1], Path(sys.argv[2])
common = ["--trace", trace, "--profile", "demo", "--policies", "round-robin", "--replicas"]
assert main(["sim", *common, "2", "--out", str(out / "sim")]) == 0
assert main(["sim", "sweep", *common, "2,3", "--out", str(out / "sweep")]) == 0
row = {"policy": "p", "hit_rate": 0.5, "ttfts_s": [0.1, 0.2]}
write_outputs([row], out / "demo")
try:
    pyplot()
except PlotsUnavailable:
    print("unavailable")
assert "matplotlib.pyplot" not in sys.modules
"""


def _trace(path: Path) -> Path:
    rows = [
        {"timestamp": 200 * i, "input_length": 600, "output_length": 4, "hash_ids": [i % 3, i]}
        for i in range(20)
    ]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return path


@pytest.mark.timeout(120)
def test_without_matplotlib_the_json_is_written_and_the_plots_skipped(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "trace.jsonl")
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, str(trace), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.count(PLOTS_SKIPPED) == 3  # sim, sweep, demo: one line each
    assert "unavailable" in lines
    for name in ("sim/summary.json", "sweep/sweep.json", "demo/summary.json"):
        assert orjson.loads((tmp_path / name).read_bytes())
    assert not list(tmp_path.rglob("*.png"))
