"""Chaos-suite fixtures: the gateway as a real process, raw and emulated engines, figures.

Every case starts its own `kvgate serve` (so one case that breaks the gateway never breaks
another) and its own engines; all are stopped by pid at teardown, also when the case fails.
The session ends with the figures table printed and written to out/chaos/.
"""

from __future__ import annotations

import resource
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sim.live.processes import ChildProcess, kvgate_command
from tests.chaos.figures import ChaosFigures, plot_latency
from tests.support.gateway_process import GatewayProcess
from tests.support.raw_engine import Behaviour, RawEngine

FIGURES = pytest.StashKey[ChaosFigures]()
RESULTS = Path("out/chaos/chaos.json")  # under the repository root
StartGateway = Callable[..., GatewayProcess]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FIGURES] = ChaosFigures()
    # 10k idle client sockets live in this process and the gateway inherits the limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def case_name(item: pytest.Item) -> str:
    name = item.nodeid.rsplit("::", 1)[-1]
    return name.removeprefix("test_")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each case's outcome (and first failure line) into the figures table."""
    report: pytest.TestReport = yield
    figures = item.config.stash.get(FIGURES, None)
    if figures is None or "tests/chaos/" not in item.nodeid:
        return report
    case = figures.case(case_name(item))
    if report.failed:
        case.outcome = "failed" if report.when == "call" else "error"
        case.failure = case.failure or _first_line(report.longreprtext)
    elif report.when == "call" and case.outcome == "not run":
        case.outcome = "passed"
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    figures = config.stash.get(FIGURES, None)
    if figures is None or not figures.cases:
        return
    figures.write(config.rootpath / RESULTS)
    png = RESULTS.with_suffix(".png")
    plotted = plot_latency(figures, config.rootpath / png)
    terminalreporter.write_sep("=", "chaos figures")
    terminalreporter.write_line(figures.table())
    terminalreporter.write_line(f"\n(written to {RESULTS}{' and ' + str(png) if plotted else ''})")


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("E "):
            return line[1:].strip()[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else ""


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``figures(key=value, ...)``: values for this case's row of the table."""
    store = request.config.stash[FIGURES]
    name = case_name(request.node)
    return lambda **values: store.record(name, **values)


@pytest.fixture
def gateway(
    request: pytest.FixtureRequest, tmp_path: Path, figures: Callable[..., None]
) -> Iterator[StartGateway]:
    """``gateway(config, env=None, wait_ready=True) -> GatewayProcess``, started; at the end
    its RSS and open-fd growth since start-up go into the figures (negative: fewer descriptors
    open than just after start-up) and it is killed by pid."""
    started: list[tuple[GatewayProcess, float, int]] = []

    def start(
        config: dict[str, Any], env: dict[str, str | None] | None = None, **kw: Any
    ) -> GatewayProcess:
        proc = GatewayProcess(config, tmp_path / f"gw{len(started)}", env)
        started.append((proc, 0.0, 0))
        proc.start(**kw)
        time.sleep(0.3)  # the readiness polls' connections close
        started[-1] = (proc, proc.rss_mb(), proc.open_fds())
        return proc

    yield start
    for proc, rss0, fds0 in started:
        if proc.running and rss0:
            time.sleep(0.3)  # closed client sockets leave the gateway's table
            figures(rss_growth_mb=round(proc.rss_mb() - rss0, 1), fd_growth=proc.open_fds() - fds0)
        proc.stop()


@pytest.fixture
def raw_engines() -> Iterator[Callable[[Behaviour], RawEngine]]:
    """``raw_engines(behaviour) -> RawEngine``, started; all stopped after the case."""
    engines: list[RawEngine] = []

    def start(behaviour: Behaviour) -> RawEngine:
        engine = RawEngine(behaviour)
        engines.append(engine)
        return engine.start()

    yield start
    for engine in engines:
        engine.stop()


class Emulator:
    """One `kvgate emulate` replica in its own process: SIGKILL it, start it again on its port."""

    def __init__(self, workdir: Path, index: int) -> None:
        self.workdir, self.index, self.port = workdir, index, 0
        self.child: ChildProcess | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Emulator:
        args = ["emulate", "--replicas", "1", "--port", str(self.port), "--model", "m1"]
        log = self.workdir / f"emulator{self.index}-{self.starts}.log"
        self.starts += 1
        self.child = ChildProcess(kvgate_command(*args), log, stop_signal=signal.SIGKILL)
        self.child.start()
        [m] = self.child.wait_for_line(r"^replica 0: http://[0-9.]+:(\d+)", timeout_s=60)
        self.port = int(m.group(1))
        return self

    def kill(self) -> None:
        """SIGKILL, as a crashed engine: no goodbye on any connection."""
        if self.child is not None:
            self.child.stop()
            self.child = None


@pytest.fixture
def emulators(tmp_path: Path) -> Iterator[Callable[[int], list[Emulator]]]:
    """``emulators(n)``: n single-replica `kvgate emulate` processes; killed after the case."""
    started: list[Emulator] = []

    def start(n: int) -> list[Emulator]:
        new = [Emulator(tmp_path, len(started) + i) for i in range(n)]
        started.extend(new)
        for emulator in new:
            emulator.start()
        return new

    yield start
    for emulator in started:
        emulator.kill()
