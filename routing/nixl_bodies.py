"""vLLM's NixlConnector prefill/decode exchange, as JSON objects: what P and D are sent.

P gets a copy of the client's body asking for one token, whole (`stream` false, no
`stream_options` or `min_tokens`, `n` 1, `max_tokens` 1 and `max_completion_tokens` 1 if
present), with `kv_transfer_params` asking it to keep the KV for a remote decode; D gets the
client's body with P's answered `kv_transfer_params` verbatim. One definition for whoever runs
the prefill leg: the gateway (`gateway.pd_legs`) and the emulator standing in for llm-d's
routing sidecar (`sim.emulator.disagg.sidecar`).
"""

from __future__ import annotations

from typing import Any

REMOTE_DECODE: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
_ONE_TOKEN_DROP = ("stream_options", "min_tokens")


def prefill_request(data: dict[str, Any]) -> dict[str, Any]:
    """P's copy of the request `data` (not changed): one token, whole, KV kept for D."""
    p = {k: v for k, v in data.items() if k not in _ONE_TOKEN_DROP}
    p.update(stream=False, max_tokens=1, n=1, kv_transfer_params=dict(REMOTE_DECODE))
    if "max_completion_tokens" in data:
        p["max_completion_tokens"] = 1
    return p


def decode_request(data: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """D's request: `data` with P's `kv_transfer_params`, verbatim (`data` not changed)."""
    return {**data, "kv_transfer_params": params}
