"""The command lines of the P/D benchmark's routers."""

from __future__ import annotations

from pathlib import Path

from bench.pd.live import RouterSpec, router_command
from bench.peers import PeerInstall
from sim.live.processes import PDFleet

KVGATE = PeerInstall("kvgate", Path("/py"), "0")
P = "http://127.0.0.1:1"
D = "http://127.0.0.1:2"


def _backends(command: list[str]) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == "--backend"]


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_kvgate_on_a_pd_fleet_gets_roles_protocol_and_mode() -> None:
    spec = RouterSpec("kvgate-pd", "kvgate", "vllm", "always")
    command = router_command(spec, KVGATE, PDFleet([(P, None)], [D]), 9000)
    assert _backends(command) == [f"{P},role=prefill", f"{D},role=decode"]
    assert _flag(command, "--pd-protocol") == "vllm"
    assert _flag(command, "--pd-mode") == "always"
    assert _flag(command, "--port") == "9000"


def test_kvgate_on_an_sglang_fleet_names_the_bootstrap_ports() -> None:
    spec = RouterSpec("kvgate-pd-sglang", "kvgate", "sglang", "conditional")
    command = router_command(spec, KVGATE, PDFleet([(P, 8998)], [D]), 9000)
    assert _backends(command)[0] == f"{P},role=prefill,bootstrap_port=8998"
    assert _flag(command, "--pd-protocol") == "sglang"


def test_kvgate_on_an_aggregated_fleet_is_plain() -> None:
    spec = RouterSpec("kvgate-agg", "kvgate", "aggregated")
    command = router_command(spec, KVGATE, PDFleet([], [P, D]), 9000)
    assert _backends(command) == [P, D]
    assert "--pd-mode" not in command


def test_a_peer_runs_its_own_pd_mode() -> None:
    install = PeerInstall("vllm-router", Path("/peer/python"), "0.1")
    spec = RouterSpec("vllm-router-pd", "vllm-router", "vllm")
    command = router_command(spec, install, PDFleet([(P, None)], [D]), 9000)
    assert "--vllm-pd-disaggregation" in command
    assert _flag(command, "--prefill") == P and _flag(command, "--decode") == D
