"""The admin API's view of a runtime (`gateway.admin_app.AdminSource`): backend state, the
metrics page and dry-run routing, as both listeners answer them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from gateway import admin
from gateway.admin_ops import AdminOperations
from gateway.asgi import check_json_content_type
from gateway.runtime import Runtime
from gateway.tuning import TuningBoard
from routing.config.schema import GatewayConfig


class AdminView:
    """What `/admin/*` and `/metrics` read of the runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    @property
    def config(self) -> GatewayConfig:
        return self._rt.config

    @property
    def operations(self) -> AdminOperations:
        return self._rt.operations

    @property
    def tuning(self) -> TuningBoard:
        return self._rt.tuning

    def backends_state(self) -> dict[str, Any]:
        """`/admin/backends`, each backend with its `x-kvgate-backend` tag."""
        rt = self._rt
        stack = rt.stack
        state = admin.backends_state(
            rt.pool,
            stack.index,
            stack.ttft_model,
            rt.ledger.cache_hits,
            tag=rt.access.headers.backend_tag,
            precise=stack.precise,
            precise_hits=rt.ledger.precise_hits,
        )
        for entry in state["backends"]:
            if (subscriber := rt.kv_loops.subscribers.get(entry["id"])) is not None:
                entry["kv_events"] = dataclasses.asdict(subscriber.counters)
            if (backend := rt.pool.find(entry["id"])) is not None:
                ops = rt.backends.describe(backend)
                entry.update((k, ops[k]) for k in ("draining", "source", "remove_when_idle"))
        tokenizers = {m: dataclasses.asdict(c) for m, c in rt.tokenizers.counters().items()}
        return {
            **state,
            "loops": rt.loops.states() if rt.loops is not None else {},
            "admission": rt.admission.state(),
            "tokenizers": tokenizers,
            "state": rt.shared.state(),
            **({"worker": rt.peers.state()} if rt.peers is not None else {}),
        }

    async def metrics_exposition(self) -> bytes:
        return await self._rt.metrics_exposition()

    async def dry_run(
        self, body: bytes, headers: Mapping[str, str], query: bytes
    ) -> dict[str, Any]:
        """`/admin/route`; `?api=` names the API, `?policy=` a profile."""
        check_json_content_type(headers.get("content-type"))
        params = parse_qs(query.decode("latin-1"))
        api, policy = params.get("api", [None])[0], params.get("policy", [None])[0]
        rt = self._rt
        data = await rt.director.parser.loads(body) if body else None
        req = rt.director.resolve(admin.dry_run_request(data, api, len(body)))
        ids = await rt.director.token_ids(req)
        return admin.dry_run(rt.router, req, headers, policy=policy, token_ids=ids, now=rt.clock())
