"""Ray for `kvgate sim sweep --ray` tests, always in processes of its own: `ray.init` changes
its process for good (a logging record factory, signal handlers), so the test process never
imports Ray.

- `local_ray()`: a local Ray instance (bound to 127.0.0.1) for the length of a `with`; its
  address.
- `python -m tests.support.ray_sweeps first|always DEATHS -- KVGATE_ARGS`: `kvgate
  KVGATE_ARGS` with `--ray`, whose task function kills its own worker — the first attempt of
  any run (`first`), or every attempt of prefix-aware on 3 replicas at rate 1 (`always`) —
  leaving a file in DEATHS for each worker it killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# Ray binds the machine's network address unless the first is set when it is imported. Ray
# 2.60 starts local instances with token authentication: a driver that names the address
# needs the second (the token is in ~/.ray, where the instance left it).
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"}
_START = """
import sys, ray
context = ray.init(address="local", num_cpus=int(sys.argv[1]), include_dashboard=False)
print(context.address_info["gcs_address"], flush=True)
sys.stdin.read()  # until the test closes it; ray.shutdown() at exit stops the instance
"""


def ray_env() -> dict[str, str]:
    env = {**os.environ, **RAY_ENV}
    env.pop("RAY_ADDRESS", None)
    return env


@contextmanager
def local_ray(num_cpus: int = 2, start_timeout_s: float = 120.0) -> Iterator[str]:
    """A local Ray instance of `num_cpus` CPUs; yields its GCS address (HOST:PORT)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _START, str(num_cpus)],
        cwd=REPO,
        env=ray_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()  # Ray's own start-up timeout bounds this
        assert address, f"the Ray instance did not start (exit {proc.poll()})"
        yield address
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=start_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def run_kvgate(*argv: str, timeout_s: float = 150.0) -> subprocess.CompletedProcess[str]:
    """`kvgate ARGV` in a process of its own, with Ray kept to 127.0.0.1."""
    return subprocess.run(
        [sys.executable, "-m", "kvgate.cli", *argv],
        cwd=REPO,
        env=ray_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _killer(mode: str, deaths: Path) -> Callable[..., Any]:
    from sim.replay.sweep.runners import run_point

    # Nested, so that Ray ships it by value: workers need not import this module.
    def lose_worker(trace: Any, policy: str, profile: Any, settings: Any) -> Any:
        if mode == "first":
            try:  # one attempt of one run, whichever starts first, gets to create the file
                os.close(os.open(deaths / "first", os.O_CREAT | os.O_EXCL))
                os._exit(1)
            except FileExistsError:
                pass
        elif policy == "prefix-aware" and settings.replicas == 3 and trace[-1].arrival_s > 5:
            (deaths / str(os.getpid())).touch()
            os._exit(1)
        return run_point(trace, policy, profile, settings)

    return lose_worker


def _main(argv: list[str]) -> int:
    from kvgate.cli import main
    from sim.replay.sweep import command
    from sim.replay.sweep.ray_runner import RayRunner

    mode, deaths, _, *kvgate = argv
    function = _killer(mode, Path(deaths))

    def open_runner(jobs: int, address: str | None, out: Any = None) -> RayRunner:
        assert address is not None
        return RayRunner(address, out, function=function)

    command.open_runner = open_runner  # type: ignore[assignment]
    return main(kvgate)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
