"""One replica's side of P/D requests: what each leg waits for, holds and answers.

- vLLM P: the request runs with `hold=True`; once finished, its blocks become a handoff named
  by its engine request id, and the answer carries `kv_transfer_params` pointing here
  (`remote_host`/`remote_port`: this HTTP server; D pulls on `POST /kvgate/pd/pull/{id}`).
- vLLM D: pulls first (the blocks past its own cached prefix, `blocks_to_move`), then runs
  the request with the whole prompt as external tokens. An unknown or expired handoff, or
  an unreachable P, is a failed load: the prompt is computed here, with a warning (vLLM's
  default `recompute` policy).
- SGLang P: opens the room and waits for D to join (up to the lease), prefills one token
  with `hold=True`, and answers once D has taken the blocks (or the lease ran out).
- SGLang D: joins the room on P's bootstrap port (`POST /kvgate/pd/rooms/{room}`, answered
  once P has prefilled and pushed), then runs with the whole prompt as external tokens; a
  room P gave up on is an error (500), as SGLang aborts a failed transfer.
The transfer is timed by P (`Handoffs.transfer`), which holds the blocks until it ends.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from sim.emulator import openai_api as api
from sim.emulator.disagg.handoffs import Handoff, Handoffs
from sim.emulator.disagg.legs import Leg, LegKind, parse_leg
from sim.emulator.disagg.settings import PDSettings
from sim.emulator.replica import Generation, Replica
from sim.engine.kv_transfer import blocks_to_move

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 5.0
_SERVER_ERROR = "InternalServerError"


@dataclass(slots=True)
class PDRequest:
    """One request's P/D leg and, for a prefill leg, the handoff its blocks go to."""

    leg: Leg
    handoff: Handoff | None = None

    @property
    def prefill(self) -> bool:
        return self.leg.prefill


class Disaggregation:
    """The P/D part of one replica: its settings, the handoffs it holds, its client to P."""

    def __init__(self, replica: Replica, settings: PDSettings) -> None:
        self.replica = replica
        self.settings = settings
        self.handoffs = Handoffs(replica, settings.lease_s)
        self.engine_id = str(uuid.uuid4())  # vLLM's `remote_engine_id`
        self.bootstrap_port = settings.bootstrap_port  # the bound one, once served
        self._client: httpx.AsyncClient | None = None

    def request(self, data: dict[str, Any]) -> PDRequest | None:
        """The request's P/D part (None: a plain request); ApiError 400 if malformed."""
        leg = parse_leg(data, self.settings)
        return None if leg is None else PDRequest(leg)

    async def close(self) -> None:
        self.handoffs.close_all()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def before_admit(
        self, request: PDRequest, prompt: Sequence[int], adapter: str | None
    ) -> int:
        """Wait for the other side as the leg requires; the prompt tokens to take as
        external (transferred) when the request enters the engine."""
        leg = request.leg
        if leg.kind is LegKind.SGLANG_PREFILL:
            handoff = request.handoff = self.handoffs.open(leg.key)
            await handoff.joined.wait()
            if handoff.outcome:
                raise api.ApiError(
                    500, f"no decode engine joined bootstrap room {leg.key}", _SERVER_ERROR
                )
            return 0
        if leg.kind is LegKind.VLLM_DECODE:
            return await self._pull(leg, prompt, adapter)
        if leg.kind is LegKind.SGLANG_DECODE:
            return await self._join(leg, prompt, adapter)
        return 0

    async def after_generation(
        self, request: PDRequest, gen: Generation, address: tuple[str, int] | None
    ) -> dict[str, Any] | None:
        """The prefill legs' last act before answering: hand the held blocks over (vLLM:
        the `kv_transfer_params` to add to the answer; SGLang: wait until D took them)."""
        leg = request.leg
        if leg.kind is LegKind.VLLM_PREFILL:
            handoff = request.handoff = self.handoffs.open(gen.request_id)
            self.handoffs.prefilled(handoff, gen.request_id, gen.prompt_tokens)
            host, port = address or ("127.0.0.1", 0)
            return {
                "kv_transfer_params": {
                    "do_remote_prefill": True,
                    "do_remote_decode": False,
                    "remote_block_ids": list(handoff.block_ids),
                    "remote_engine_id": self.engine_id,
                    "remote_request_id": gen.request_id,
                    "remote_host": host,
                    "remote_port": port,
                    "tp_size": 1,
                }
            }
        if request.handoff is not None and leg.kind is LegKind.SGLANG_PREFILL:
            self.handoffs.prefilled(request.handoff, gen.request_id, gen.prompt_tokens)
            await request.handoff.done.wait()
        return None

    def abandon(self, request: PDRequest, request_id: str) -> None:
        """The request ended early (its client left, an error): drop what it holds."""
        handoff = request.handoff
        if handoff is not None and not handoff.taken:
            self.handoffs.fail(handoff)
        if request.prefill:
            self.replica.release(request_id)

    async def serve_pull(self, key: str, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """P's answer to a vLLM D's pull of handoff `key`."""
        handoff = self.handoffs.get(key)
        engine = data.get("remote_engine_id")
        if handoff is None or not handoff.ready.is_set() or handoff.taken:
            return 404, {"error": f"no handoff {key!r} to read (unknown, expired or read)"}
        if engine and engine != self.engine_id:
            return 404, {"error": f"handoff {key!r} is not on engine {engine!r}"}
        return 200, await self._transfer(handoff, data)

    async def serve_room(self, room: str, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """P's answer to an SGLang D joining bootstrap room `room`: once prefilled and pushed."""
        handoff = self.handoffs.open(room)
        if handoff.taken:
            return 409, {"error": f"bootstrap room {room} was already joined"}
        self.handoffs.join(handoff)
        wait_s = self.settings.wait_timeout_s / self.replica.speedup
        try:
            await asyncio.wait_for(handoff.ready.wait(), wait_s)
        except TimeoutError:
            self.handoffs.fail(handoff)
        except asyncio.CancelledError:  # D left: nobody will take the room's KV
            self.handoffs.fail(handoff)
            raise
        if handoff.outcome or handoff.taken:
            return 410, {"error": f"bootstrap room {room}: {handoff.outcome or 'taken'}"}
        return 200, await self._transfer(handoff, data)

    async def _transfer(self, handoff: Handoff, data: dict[str, Any]) -> dict[str, Any]:
        total = len(handoff.block_ids)
        asked = data.get("blocks")
        blocks = min(asked, total) if isinstance(asked, int) and asked >= 0 else total
        seconds = await self.handoffs.transfer(handoff, blocks)
        return {
            "prompt_tokens": handoff.prompt_tokens,
            "blocks": total,
            "moved_blocks": blocks,
            "transfer_s": seconds,
        }

    def _blocks_to_move(self, prompt: Sequence[int], adapter: str | None) -> int:
        held = self.replica.cached_prefix_blocks(prompt, adapter)
        size = self.replica.profile.config.block_size
        return blocks_to_move(len(prompt), len(prompt), size, held)

    async def _pull(self, leg: Leg, prompt: Sequence[int], adapter: str | None) -> int:
        if not leg.peer:
            log.warning("decode request without a handoff to pull: computing its prompt here")
            return 0
        blocks = self._blocks_to_move(prompt, adapter)
        body = {"remote_engine_id": leg.remote_engine_id, "blocks": blocks}
        try:
            url = f"{leg.peer}/kvgate/pd/pull/{quote(leg.key, safe='')}"
            r = await self._http().post(url, json=body)
        except httpx.HTTPError as exc:
            log.warning(
                "KV pull of %s from %s failed (%s): computing it here", leg.key, leg.peer, exc
            )
            return 0
        if r.status_code != 200:
            log.warning(
                "KV pull of %s from %s refused (%d): computing it here",
                leg.key,
                leg.peer,
                r.status_code,
            )
            return 0
        return len(prompt)

    async def _join(self, leg: Leg, prompt: Sequence[int], adapter: str | None) -> int:
        blocks = self._blocks_to_move(prompt, adapter)
        url = f"{leg.peer}/kvgate/pd/rooms/{leg.key}"
        try:
            r = await self._http().post(url, json={"blocks": blocks})
        except httpx.HTTPError as exc:
            message = f"KV transfer for bootstrap room {leg.key} failed: {exc}"
            raise api.ApiError(500, message, _SERVER_ERROR) from None
        if r.status_code != 200:
            message = f"KV transfer for bootstrap room {leg.key} failed: {r.status_code} {r.text}"
            raise api.ApiError(500, message, _SERVER_ERROR)
        return len(prompt)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            timeout = self.settings.wait_timeout_s / self.replica.speedup + _CONNECT_TIMEOUT_S
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(timeout, connect=_CONNECT_TIMEOUT_S),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
            )
        return self._client
