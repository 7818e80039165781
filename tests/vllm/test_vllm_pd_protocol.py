"""vLLM's prefill/decode protocol by hand on a real P/D pair: does D decode from P's blocks?

Two vLLM CPU servers joined by NixlConnector (`tests.vllm.pd_pair`: seeded random weights,
blocks of 32 tokens). For token-id prompts under a block, of blocks and a part, of 28 and of
47 blocks, and for a chat:

1. the reference: D answers alone (greedy, 16 tokens), then its prefix cache is reset;
2. P gets `prefill_body` (one token, `do_remote_decode`) under an `X-Request-Id` and answers
   `kv_transfer_params` naming its side channel, the request and the prompt's blocks;
3. D gets the client's body with those params, verbatim, under the same id.

D counts the whole prompt as `external_kv_transfer` and computes none of it; its greedy
tokens equal the reference's, while a control prompt sharing only the last 8 tokens answers
otherwise (the answer depends on the blocks D pulled); P then holds no KV blocks. Writes
out/vllm-pd/protocol.json. `make test-vllm`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import httpx
import pytest

from tests.vllm.conftest import PD_OUT
from tests.vllm.pd_pair import (
    PdPair,
    aggregated,
    decode_body,
    prefill,
    read_counters,
    token_ids,
)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

PROMPT_TOKENS = (31, 65, 887, 1500)
MAX_TOKENS = 16
FREED_WITHIN_S = 10.0  # well under the 30 s lease after which P frees unread blocks anyway
CONTROL_TAIL = 8  # tokens the control prompt shares with the prompt, at its end


async def test_prefill_on_p_then_decode_on_d(pd_pair: PdPair) -> None:
    rng = random.Random(31)
    rows: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=300.0) as client:
        for i, n in enumerate(PROMPT_TOKENS):
            ids = [rng.randrange(10, pd_pair.spec.vocab_size) for _ in range(n)]
            body = _body(pd_pair, prompt=ids)
            row = await _split(client, pd_pair, "/v1/completions", body, f"pd-tokens-{i}")
            head = [rng.randrange(10, pd_pair.spec.vocab_size) for _ in range(n - CONTROL_TAIL)]
            control = {**body, "prompt": head + ids[-CONTROL_TAIL:]}
            row["control"] = token_ids(
                await aggregated(client, pd_pair, "/v1/completions", control)
            )
            rows.append(row)
        words = " ".join(rng.choice(("prefill", "decode", "block", "cache")) for _ in range(300))
        chat = _body(pd_pair, messages=[{"role": "user", "content": words}])
        rows.append(await _split(client, pd_pair, "/v1/chat/completions", chat, "pd-chat"))
    _write(pd_pair, rows)
    for row in rows:
        n = row["prompt_tokens"]
        assert row["split"] == row["reference"], row
        assert row["d_external_tokens"] == n, row  # D pulled the whole prompt...
        assert row["d_local_compute_tokens"] <= pd_pair.block_size, row  # ...computed ~none
        assert row["d_nixl_bytes"] > 0, row
        assert row["remote_port"] == pd_pair.side_channel_ports[0], row
        assert row["remote_blocks"] == -(-n // pd_pair.block_size), row
        assert row["p_blocks_freed_s"] is not None, row  # P let its blocks go once D read them
        if "control" in row:
            assert row["control"] != row["reference"], row


def _body(pair: PdPair, **fields: Any) -> dict[str, Any]:
    return {"model": pair.model, "max_tokens": MAX_TOKENS, "temperature": 0, **fields}


async def _split(
    client: httpx.AsyncClient, pair: PdPair, path: str, body: dict[str, Any], request_id: str
) -> dict[str, Any]:
    """The reference, then the request split by hand; what both legs did."""
    reference = token_ids(await aggregated(client, pair, path, body))
    before = await read_counters(client, pair.decode)
    started = time.monotonic()
    answer = await prefill(client, pair, path, body, request_id)
    prefilled = time.monotonic()
    params = answer["kv_transfer_params"]
    resp = await client.post(
        pair.decode + path,
        json=decode_body({**body, "return_token_ids": True}, params),
        headers={"X-Request-Id": request_id},
    )
    decoded = resp.raise_for_status().json()
    done = time.monotonic()
    after = await read_counters(client, pair.decode)
    freed_s = await _p_blocks_freed(client, pair)
    [blocks] = params["remote_block_ids"]  # one KV-cache group
    return {
        "path": path,
        "prompt_tokens": decoded["usage"]["prompt_tokens"],
        "reference": reference,
        "split": token_ids(decoded),
        "prefill_s": round(prefilled - started, 3),
        "decode_s": round(done - prefilled, 3),
        "remote_port": params["remote_port"],
        "remote_host": params["remote_host"],
        "remote_request_id": params["remote_request_id"],
        "remote_blocks": len(blocks),
        "d_external_tokens": after.external - before.external,
        "d_local_compute_tokens": after.local_compute - before.local_compute,
        "d_nixl_bytes": after.nixl_bytes - before.nixl_bytes,
        "p_blocks_freed_s": freed_s,
    }


async def _p_blocks_freed(client: httpx.AsyncClient, pair: PdPair) -> float | None:
    """Seconds until P holds no KV blocks (it frees them once D's read is acknowledged);
    None if it still holds some after `FREED_WITHIN_S`."""
    started = time.monotonic()
    while (await read_counters(client, pair.prefill)).kv_usage > 0:
        if time.monotonic() - started > FREED_WITHIN_S:
            return None
        await asyncio.sleep(0.1)
    return round(time.monotonic() - started, 2)


def _write(pair: PdPair, rows: list[dict[str, Any]]) -> None:
    PD_OUT.mkdir(parents=True, exist_ok=True)
    path = PD_OUT / "protocol.json"
    figures = {"warm_up_attempts": pair.warm_up_attempts, "requests": rows}
    path.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\nvLLM P/D by hand ({path}; warm-up took {pair.warm_up_attempts} split requests):")
    for row in rows:
        shown = {k: v for k, v in row.items() if k not in ("reference", "split", "control")}
        print(f"  {shown} equal={row['split'] == row['reference']}")
