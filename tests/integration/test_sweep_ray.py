"""`kvgate sim sweep --ray` on a real local Ray instance (2 CPUs, bound to 127.0.0.1): the
same results as `--jobs 1`, a worker killed mid-run retried, a run lost every time failing
the sweep, and `--ray` alone starting (and stopping) an instance of its own. Ray runs in
processes of its own (`tests.support.ray_sweeps`), never in the test process."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from kvgate.cli import build_parser
from sim.live.processes import free_port
from sim.replay.sweep import run_sweep
from sim.replay.sweep.ray_runner import MAX_RETRIES
from tests.support.ray_sweeps import REPO, local_ray, ray_env, run_kvgate
from tests.support.sweep_traces import TIMED_FIELDS, tenant_trace_file, untimed_runs

GRID_44 = [  # 4 policies x their weights x 2 fleets x 2 rates: 44 runs
    "--policies", "round-robin,least-load,prefix-aware,oracle",
    "--weights", "prefix-match-scorer=1,4;in-flight-scorer=1,2",
    "--replicas", "2,3", "--rate-scale", "1,2",
]  # fmt: skip
GRID_8 = ["--policies", "round-robin,prefix-aware", "--replicas", "2,3", "--rate-scale", "1,2"]

# A Ray instance starts in ~5 s, or ~30 s on a busy box; the module takes ~30-45 s on 2 cores.
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A local Ray instance for the module's tests; its GCS address."""
    with local_ray(num_cpus=2) as address:
        yield address
    assert "ray" not in sys.modules  # ray.init would have changed this process for good


def _args(tmp_path: Path, name: str, grid: list[str], *extra: str) -> list[str]:
    trace = tmp_path / "trace.jsonl"
    if not trace.exists():
        tenant_trace_file(trace, n=60)
    return [
        "sim", "sweep", "--trace", str(trace), "--profile", "demo",
        "--out", str(tmp_path / name), *grid, *extra,
    ]  # fmt: skip


def _local(tmp_path: Path, grid: list[str]) -> dict[str, Any]:
    """The sweep run with --jobs 1, in this process."""
    assert run_sweep(build_parser().parse_args(_args(tmp_path, "local", grid)), io.StringIO()) == 0
    return _outcome(tmp_path / "local")


def _outcome(out_dir: Path) -> dict[str, Any]:
    """What a sweep must reproduce: every run's summary (wall and CPU seconds aside) in rank
    order, the best run and its routing snippet."""
    report = orjson.loads((out_dir / "sweep.json").read_bytes())
    best = {k: v for k, v in report["best"].items() if k not in TIMED_FIELDS}
    return {
        "runs": untimed_runs(out_dir / "sweep.json"),
        "best": best,
        "best_routing.yaml": (out_dir / "best_routing.yaml").read_text(),
    }


@pytest.mark.slow
def test_a_sweep_of_44_runs_on_ray_matches_jobs_1(tmp_path: Path, ray_address: str) -> None:
    local = _local(tmp_path, GRID_44)
    assert len(local["runs"]) == 44
    proc = run_kvgate(*_args(tmp_path, "ray", GRID_44, "--ray", ray_address))
    assert proc.returncode == 0, proc.stderr
    assert f"Ray at {ray_address}, 2 CPUs on 1 node(s)" in proc.stdout
    progress = [line for line in proc.stdout.splitlines() if line.startswith("run ")]
    assert [line.split(":")[0] for line in progress] == [f"run {i}/44" for i in range(1, 45)]
    assert _outcome(tmp_path / "ray") == local  # every summary, the ranking, the best run


def _faulty(mode: str, deaths: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`kvgate ARGV` whose Ray tasks kill their own workers (`tests.support.ray_sweeps`)."""
    return subprocess.run(
        [sys.executable, "-m", "tests.support.ray_sweeps", mode, str(deaths), "--", *argv],
        cwd=REPO,
        env=ray_env(),
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


@pytest.mark.slow
def test_a_worker_lost_mid_run_is_retried(tmp_path: Path, ray_address: str) -> None:
    local = _local(tmp_path, GRID_8)
    deaths = tmp_path / "deaths"
    deaths.mkdir()
    proc = _faulty("first", deaths, _args(tmp_path, "ray", GRID_8, "--ray", ray_address))
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in deaths.iterdir()] == ["first"]  # a worker did die
    assert "run 8/8" in proc.stdout
    assert _outcome(tmp_path / "ray") == local


@pytest.mark.slow
def test_a_run_lost_every_time_fails_the_sweep(tmp_path: Path, ray_address: str) -> None:
    deaths = tmp_path / "deaths"
    deaths.mkdir()
    proc = _faulty("always", deaths, _args(tmp_path, "ray", GRID_8, "--ray", ray_address))
    assert proc.returncode == 3, proc.stderr
    failed = [line for line in proc.stderr.splitlines() if line.startswith("kvgate: ")]
    assert len(failed) == 1 and failed[0].startswith(
        f"kvgate: run 7 (prefix-aware - x3 rate 1) failed on Ray after {MAX_RETRIES} retries: "
    )
    assert "WorkerCrashedError" in failed[0] and "Traceback" not in proc.stderr
    assert len(list(deaths.iterdir())) == MAX_RETRIES + 1  # one worker per attempt
    assert not (tmp_path / "ray" / "sweep.json").exists()


def test_an_address_where_nothing_listens_fails_at_once(tmp_path: Path) -> None:
    port = free_port()
    proc = run_kvgate(*_args(tmp_path, "ray", GRID_8, "--ray", f"127.0.0.1:{port}"))
    assert proc.returncode == 2
    assert proc.stderr == f"kvgate: --ray 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}\n"


@pytest.mark.slow
def test_ray_alone_starts_an_instance_of_its_own(tmp_path: Path) -> None:
    local = _local(tmp_path, GRID_8)
    proc = run_kvgate(*_args(tmp_path, "ray", GRID_8, "--ray"))
    assert proc.returncode == 0, proc.stderr
    assert "Started a local Ray instance" in proc.stderr
    assert "run 8/8" in proc.stdout
    assert _outcome(tmp_path / "ray") == local
