"""Sweep runners as the command line picks them: local, or Ray (`--ray`), and what a user
without Ray installed is told. Ray itself runs in tests/integration/test_sweep_ray.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvgate.cli import build_parser, main
from sim.replay.sweep.command import open_runner
from sim.replay.sweep.runners import LocalRunner
from tests.support.sweep_traces import tenant_trace_file


def _sweep_args(tmp_path: Path, *extra: str) -> list[str]:
    trace = tenant_trace_file(tmp_path / "trace.jsonl", n=20)
    return [
        "sim", "sweep", "--trace", str(trace), "--profile", "demo", "--out", str(tmp_path / "out"),
        "--policies", "round-robin", "--replicas", "2", *extra,
    ]  # fmt: skip


def test_ray_takes_an_optional_address(tmp_path: Path) -> None:
    parse = build_parser().parse_args
    assert parse(_sweep_args(tmp_path)).ray is None
    assert parse(_sweep_args(tmp_path, "--ray")).ray == ""  # this machine's instance
    assert parse(_sweep_args(tmp_path, "--ray", "auto", "--jobs", "1")).ray == "auto"
    assert parse(_sweep_args(tmp_path, "--ray", "--jobs", "1")).ray == ""
    assert parse(_sweep_args(tmp_path, "--ray", "ray://head:10001")).ray == "ray://head:10001"


def test_without_ray_runs_are_local() -> None:
    runner = open_runner(1, None)
    assert isinstance(runner, LocalRunner) and runner.describe() == "local, 1 job"
    assert open_runner(3, None).describe() == "local, 3 jobs"


@pytest.mark.parametrize("address", [[], ["auto"], ["ray://head:10001"]])
def test_ray_not_installed_is_one_line_naming_the_extra(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    address: list[str],
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    assert main(_sweep_args(tmp_path, "--ray", *address)) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "kvgate: --ray needs Ray, which is not installed: pip install 'kvgate[ray]'\n"
    )
    assert captured.out == ""
    assert not (tmp_path / "out").exists()


def test_jobs_and_ray_exclude_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_sweep_args(tmp_path, "--ray", "auto", "--jobs", "2")) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvgate: --jobs is for local runs") and "Traceback" not in err


def test_help_documents_ray(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sim", "sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--ray [ADDRESS]" in text and "kvgate[ray]" in text
    assert "--ray auto, --ray HEAD:6379 or --ray ray://HEAD:10001" in text
    assert "3 if a run was lost on the cluster" in text
