"""`kvgate serve` as a real child process, with a config file written by the test.

The chaos suite attacks the gateway as users run it: its own process (uvloop, the httptools
protocol, its server settings), a port it picked itself, its log in a file. `GatewayProcess`
also reads the process's resident memory and open descriptors from /proc, so a case can
report what the attack cost. Killed by its pid (`sim.live.processes.ChildProcess`).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import yaml

from sim.live.processes import ChildProcess, kvgate_command

# Fast probes and ejections so a case sees health changes within a second or two.
FAST_HEALTH: dict[str, Any] = {
    "probe_interval_s": 0.1,
    "probe_timeout_s": 1.0,
    "fail_threshold": 2,
    "success_threshold": 2,
    "passive_fail_threshold": 2,
    "ejection_base_s": 1.0,
    "ejection_max_s": 2.0,
    "scrape_interval_s": 0.1,
    "scrape_timeout_s": 1.0,
    "metrics_stale_after_s": 1.0,
}


def gateway_config(backends: list[str], **sections: Any) -> dict[str, Any]:
    """A config: ``backends`` as URLs, fast health, round-robin, access log off, plus
    ``sections`` merged over those (a section given here replaces keys, not the section)."""
    raw: dict[str, Any] = {
        "backends": [{"url": url} for url in backends],
        "health": dict(FAST_HEALTH),
        "routing": {"policy": "round-robin"},
        "server": {"access_log": False},
    }
    for name, values in sections.items():
        if isinstance(values, dict) and isinstance(raw.get(name), dict):
            raw[name] = {**raw[name], **values}
        else:
            raw[name] = values
    return raw


class GatewayProcess:
    """One `kvgate serve --config FILE --port 0`; ``url`` once it listens."""

    def __init__(
        self, config: dict[str, Any], workdir: Path, env: dict[str, str | None] | None = None
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "kvgate.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "kvgate.log"
        command = kvgate_command("serve", "--config", str(self.config_path), "--port", "0")
        # Killed, not stopped: a case is over, and a drain would only make the suite slower.
        self._child = ChildProcess(command, self.log_path, env=env, stop_signal=signal.SIGKILL)
        self.url = ""

    @property
    def pid(self) -> int:
        return self._child.pid

    @property
    def running(self) -> bool:
        return self._child.running

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def start(self, wait_ready: bool = True) -> GatewayProcess:
        """Start and wait until it listens (and answers /ready unless told not to).

        A config the gateway refuses fails here with its own message and the file, so the
        case's failure says which setting was expected to exist.
        """
        self._child.start()
        try:
            [m] = self._child.wait_for_line(r"Uvicorn running on (http://[0-9.:]+)", timeout_s=60)
        except RuntimeError as exc:
            raise AssertionError(
                f"{_why_not_started(self.log_text())}\n"
                f"config:\n{self.config_path.read_text()}\n{exc}"
            ) from None
        self.url = m.group(1)
        if wait_ready:
            self._child.wait_for_http(self.url + "/ready", timeout_s=30.0, interval_s=0.05)
        return self

    def stop(self) -> None:
        self._child.stop()

    def send_signal(self, sig: signal.Signals) -> None:
        """Signal the gateway process (SIGHUP: reload its config)."""
        os.kill(self.pid, sig)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_mb(self) -> float:
        """Resident memory (VmRSS) in MB."""
        return self._status_mb("VmRSS:")

    def peak_rss_mb(self) -> float:
        """The most resident memory the process ever had (VmHWM) in MB."""
        return self._status_mb("VmHWM:")

    def _status_mb(self, field: str) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
        return 0.0

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def healthy(self, timeout: float = 5.0) -> bool:
        """``GET /health`` answers 200 within ``timeout``."""
        try:
            return httpx.get(self.url + "/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False


def _why_not_started(log: str) -> str:
    """One line: the settings the gateway refused (which the case expects to exist), or that
    it failed to start."""
    if "invalid field(s)" in log:
        start = log.index("invalid field(s)")
        fields = [line.strip() for line in log[start:].splitlines()[1:] if line.startswith("  ")]
        return "kvgate serve refused the case's config, expected valid: " + "; ".join(fields)
    return "kvgate serve exited before listening (start-up failed; its log follows)"
