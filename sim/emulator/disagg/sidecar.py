"""A vLLM decode replica standing in for llm-d's routing sidecar in front of it.

A request with header `x-prefiller-host-port: HOST:PORT` (set by an endpoint picker that split
it) and no `kv_transfer_params` first runs its prefill leg: P's copy of the body
(`routing.nixl_bodies.prefill_request`) is posted to `http://HOST:PORT` on the same path with
the same `X-Request-Id`; the request is then served as a remote-prefill decode with the
`kv_transfer_params` P answered. A leg that fails (no answer, an error status, an answer
without params) leaves the replica to prefill alone, with a warning. Without the header the
request is served as it came (the sidecar forwards it). Prefill replicas have no sidecar.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from routing.nixl_bodies import decode_request, prefill_request
from sim.emulator.disagg.settings import PDSettings

log = logging.getLogger(__name__)

PREFILLER_HEADER = b"x-prefiller-host-port"


def prefiller_of(settings: PDSettings, header: str | None, data: dict[str, Any]) -> str | None:
    """The P (host:port) this replica's sidecar runs the request in `data` on first, from
    `header` (llm-d's); None: no prefill leg here."""
    prefiller = (header or "").strip()
    if not prefiller or settings.protocol != "vllm" or settings.role == "prefill":
        return None
    return prefiller if data.get("kv_transfer_params") is None else None


async def prefill_remotely(
    client: httpx.AsyncClient, prefiller: str, path: str, data: dict[str, Any], request_id: str
) -> dict[str, Any]:
    """Run the prefill leg on `prefiller` (host:port); the body D serves: `data` with P's
    `kv_transfer_params`, or `data` as it is when the leg failed (D prefills alone)."""
    url = f"http://{prefiller}{path}"
    try:
        r = await client.post(url, json=prefill_request(data), headers={"X-Request-Id": request_id})
    except httpx.HTTPError as exc:
        log.warning("prefill leg on %s failed (%s): prefilling here", prefiller, exc)
        return data
    if r.status_code != 200:
        log.warning("prefill leg on %s answered %d: prefilling here", prefiller, r.status_code)
        return data
    try:
        params = r.json().get("kv_transfer_params")
    except (ValueError, AttributeError):
        params = None
    if not isinstance(params, dict):
        log.warning("prefill leg on %s answered no kv_transfer_params: prefilling here", prefiller)
        return data
    return decode_request(data, params)
