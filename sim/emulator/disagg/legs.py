"""A request's part in a P/D pair, read from its body by the replica's role and protocol.

vLLM (any role, as a `kv_both` NixlConnector engine): `kv_transfer_params.do_remote_decode`
makes the replica P for the request, `do_remote_prefill` (with P's `remote_*` fields) makes it
D. SGLang: a `bootstrap_room` (with `bootstrap_host`, `bootstrap_port`) makes a `prefill`
replica P and a `decode` replica D; a `both` replica serves the request whole, as an SGLang
server without a disaggregation mode does. No fields: a plain request, whatever the role.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from sim.emulator import openai_api as api
from sim.emulator.disagg.settings import PDSettings


class LegKind(Enum):
    VLLM_PREFILL = "vllm-prefill"
    VLLM_DECODE = "vllm-decode"
    SGLANG_PREFILL = "sglang-prefill"
    SGLANG_DECODE = "sglang-decode"


@dataclass(frozen=True, slots=True)
class Leg:
    """What the request asks of this replica; `peer` is where the other side is (D's legs:
    P's address, from `remote_host`/`remote_port` or `bootstrap_host`/`bootstrap_port`)."""

    kind: LegKind
    key: str = ""  # the handoff's name: P's `remote_request_id`, or the bootstrap room
    peer: str = ""  # http://host:port of P (decode legs)
    remote_engine_id: str = ""

    @property
    def prefill(self) -> bool:
        return self.kind in (LegKind.VLLM_PREFILL, LegKind.SGLANG_PREFILL)


def parse_leg(data: dict[str, Any], settings: PDSettings) -> Leg | None:
    """This replica's leg of the request in `data` (None: a plain request); ApiError 400 for
    P/D fields it cannot use."""
    if settings.protocol == "vllm":
        params = data.get("kv_transfer_params")
        return _vllm_leg(params) if isinstance(params, dict) else None
    if data.get("bootstrap_room") is None or settings.role == "both":
        return None
    room = data["bootstrap_room"]
    if not isinstance(room, int) or isinstance(room, bool):
        raise api.ApiError(400, "bootstrap_room must be one integer (batches are not emulated)")
    if settings.role == "prefill":
        return Leg(LegKind.SGLANG_PREFILL, key=str(room))
    host, port = data.get("bootstrap_host"), data.get("bootstrap_port")
    if not isinstance(host, str) or not isinstance(port, int):
        raise api.ApiError(400, "a decode request needs bootstrap_host and bootstrap_port")
    return Leg(LegKind.SGLANG_DECODE, key=str(room), peer=_url(host, port))


def _vllm_leg(params: dict[str, Any]) -> Leg | None:
    if params.get("do_remote_decode"):
        return Leg(LegKind.VLLM_PREFILL)
    if not params.get("do_remote_prefill"):
        return None
    host, port = params.get("remote_host"), params.get("remote_port")
    rid, engine = params.get("remote_request_id"), params.get("remote_engine_id")
    if not (isinstance(host, str) and isinstance(port, int) and isinstance(rid, str)):
        # Nowhere to pull from: a failed load, the prompt is computed here (see coordinator).
        return Leg(LegKind.VLLM_DECODE)
    engine_id = engine if isinstance(engine, str) else ""
    return Leg(LegKind.VLLM_DECODE, rid, _url(host, port), engine_id)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
