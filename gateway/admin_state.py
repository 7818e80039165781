"""What the admin API reports about the gateway's backends, and the collectors `/metrics`
reads at scrape time: both are views over the app's parts, kept out of `gateway.app`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from gateway import admin
from gateway.gie_metrics import InferenceExtensionCollector
from gateway.health_metrics import BackendHealthCollector
from scoring.stack import RoutingStack

if TYPE_CHECKING:
    from gateway.app import GatewayApp


def backends_state(app: GatewayApp) -> dict[str, Any]:
    """`/admin/backends` (both listeners), each backend with its `x-kvgate-backend` tag."""
    state = admin.backends_state(
        app.pool,
        app.prefix_index,
        app.ttft_model,
        app.prefix.cache_hits,
        tag=app.front_door.headers.backend_tag,
        precise=app.precise_index,
        precise_hits=app.prefix.precise_hits,
    )
    for entry in state["backends"]:
        if (subscriber := app.kv_events.get(entry["id"])) is not None:
            entry["kv_events"] = dataclasses.asdict(subscriber.counters)
        if (backend := app.pool.find(entry["id"])) is not None:
            ops = app.backends.describe(backend)
            entry.update((k, ops[k]) for k in ("draining", "source", "remove_when_idle"))
    loops = app.loops.states() if app.loops else {}
    tokenizers = {m: dataclasses.asdict(c) for m, c in app.tokenizers.counters().items()}
    return {
        **state,
        "loops": loops,
        "admission": app.admission.state(),
        "tokenizers": tokenizers,
        "state": app.shared.state(),
        **({"worker": app.peers.state()} if app.peers is not None else {}),
    }


def register_scrape_collectors(app: GatewayApp, stack: RoutingStack, pool_name: str) -> None:
    """Per-backend health, index and KV-event figures, and the Inference Extension's names
    (`pool_name`), read from the app's state when `/metrics` is scraped."""
    app.metrics.registry.register(
        BackendHealthCollector(
            app.pool,
            app.kv_events,
            app.clock,
            precise=stack.precise,
            precise_hits=app.prefix.precise_hits,
            index=stack.index,
        )
    )
    app.metrics.registry.register(InferenceExtensionCollector(app.pool, app.metrics, pool_name))
