"""`kvgate tune` as the gateway's child: started with it, restarted when it exits, stopped
with it (docs/self-tuning.md).

With `tuning.mode` shadow or apply and `tuning.spawn` (the default), `kvgate serve` starts
the tuner beside itself, niced, on its own config file and recording, pointed at its own
admin API (the admin listener when there is one, else the API port, on the loopback when
the gateway listens on every address). The gateway's supervisor runs it as one of its
loops: a tuner that exits is started again after the loop's backoff; when the gateway
stops, the tuner gets SIGTERM, then SIGKILL after `STOP_GRACE_S`. A gateway killed outright
cannot stop it: the tuner is started with `--parent` and exits by itself once the gateway
is gone. It never sits on the request path: a process of its own, as `kvgate tune` is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)
STOP_GRACE_S = 5.0
WAIT_FOR_ADDRESS_S = 0.05


class TunerExitedError(RuntimeError):
    """The tuner process ended on its own (the supervisor starts it again)."""


@dataclass(frozen=True, slots=True)
class TunerChild:
    """How to start the tuner: the `kvgate tune` arguments but `--gateway URL`, which
    `run` adds once the admin API's address is known."""

    arguments: Sequence[str]
    nice: bool = True

    def command(self, admin_url: str) -> list[str]:
        """The child's command line, for the gateway whose admin API is at `admin_url`."""
        tune = [sys.executable, "-m", "kvgate.cli", "tune", "--gateway", admin_url]
        below = ["nice", "-n", "10"] if self.nice and shutil.which("nice") else []
        return [*below, *tune, *self.arguments]

    async def run(self, admin_url: Callable[[], str | None]) -> None:
        """Wait for the admin API's address, start the tuner and wait for it; raises
        `TunerExitedError` when it ends, and stops it when cancelled."""
        url = admin_url()
        while url is None:  # the API port is bound after the loops start
            await asyncio.sleep(WAIT_FOR_ADDRESS_S)
            url = admin_url()
        command = self.command(url)
        process = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.DEVNULL)
        log.info("tuner started (pid %d): %s", process.pid, " ".join(command))
        try:
            status = await process.wait()
        except asyncio.CancelledError:
            await _stop(process)
            raise
        raise TunerExitedError(f"the tuner (pid {process.pid}) exited with status {status}")


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL if it is still there after `STOP_GRACE_S`."""
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(asyncio.shield(process.wait()), STOP_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    log.info("tuner stopped (pid %d)", process.pid)


def local_address(host: str, port: int, scheme: str = "http") -> str:
    """A URL for a listener on `host`:`port` from this machine: the loopback for a wildcard
    address."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"
