"""`build_runtime`: the one builder of a gateway's parts from a validated config.

Order: routing stack → pool and metrics → KV-event loops and cache ledger → tokenizers →
shared state (and sibling workers) → router → stored responses' affinity → director →
admission, backends, live config and admin operations. Clock and RNG are injected (a test or
the differential check passes its own); plugin errors become `ConfigError`s. Nothing here
starts a task or opens a socket: `gateway.services.Services` does, for whichever entry point
runs the runtime.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from adapters.kv_events import KvEventBatch
from gateway.access_control import AccessControl
from gateway.admin_ops import AdminOperations
from gateway.admission import build_admission
from gateway.cache_ledger import CacheLedger
from gateway.config_reload import LiveConfig
from gateway.director import Director
from gateway.gie_metrics import InferenceExtensionCollector
from gateway.health_metrics import BackendHealthCollector
from gateway.health_settings import health_policy, probe_readmit_s
from gateway.kv_event_loops import KvEventLoops
from gateway.metrics import GatewayMetrics
from gateway.pod_backends import PodBackends
from gateway.recorder import recorder_for
from gateway.responses.affinity import EVENTS, ResponseAffinity
from gateway.router import RequestRouter
from gateway.runtime import Runtime
from gateway.runtime_backends import RuntimeBackends, backend_spec, kv_settings
from gateway.sharing import build_sharing
from gateway.state.collector import SharedStateCollector
from gateway.tokens.backends import healthy_backend_picker
from gateway.tokens.build import build_tokenizers
from gateway.tracing.setup import build_tracing
from gateway.tuning import TuningBoard
from health.pool import Backend, BackendPool
from routing.admission.objectives import Objectives
from routing.config.objectives import RewriteEntry
from routing.config.schema import ConfigError, GatewayConfig
from routing.model_rewrite import ModelRewrites, RewriteRule
from routing.registry import PluginError
from scoring.pd.planner import PdPlanner, new_link_model
from scoring.stack import build_routing_stack, build_scheduler

if TYPE_CHECKING:
    from gateway.workers.context import WorkerContext


def build_runtime(
    config: GatewayConfig,
    *,
    workers: WorkerContext | None = None,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> Runtime:
    """The runtime for `config` (`workers`: as a worker of `kvgate serve --workers N`)."""
    if not config.backends and not config.discovery.pool:
        raise ConfigError(
            "no backends configured: give --backend URL, --pool NAME or a config file"
        )
    try:
        return _build(config, workers, clock, rng or random.Random())
    except ConfigError:
        raise
    except (PluginError, ValueError) as exc:
        raise ConfigError(f"routing: {exc}") from exc


def _build(
    config: GatewayConfig,
    workers: WorkerContext | None,
    clock: Callable[[], float],
    rng: random.Random,
) -> Runtime:
    stack = build_routing_stack(config.routing, clock, rng)
    h = config.health
    pool = BackendPool(
        map(backend_spec, config.backends), health_policy(h), clock,
        stale_after_s=h.metrics_stale_after_s,
    )  # fmt: skip
    metrics = GatewayMetrics(models=pool.known_models)
    precise = stack.precise

    def apply_kv_batch(backend_id: str, batch: KvEventBatch) -> None:
        precise.apply(backend_id, batch.events)

    # Configured publishers now; discovered pods' and runtime backends' join and leave.
    kv_loops = KvEventLoops({}, precise, apply_kv_batch, pool)
    for entry in config.backends:
        if (settings := kv_settings(entry)) is not None:
            kv_loops.follow(backend_spec(entry).id, settings)
    ledger = CacheLedger(stack.feed, precise)
    # Exact prompt token ids for the precise index (a bad local path fails the start).
    tokenizers = build_tokenizers(config.tokenizers, healthy_backend_picker(pool))
    metrics.registry.register(
        BackendHealthCollector(
            pool,
            kv_loops.subscribers,
            clock,
            precise=precise,
            precise_hits=ledger.precise_hits,
            index=stack.index,
        )
    )
    pool_name = config.discovery.pool or "default"
    metrics.registry.register(InferenceExtensionCollector(pool, metrics, pool_name))
    # Routing state shared with other gateways (`state:`) or sibling workers (--workers).
    shared, peers = build_sharing(
        config, stack, pool, ledger,
        workers=workers,
        own_metrics=lambda: runtime.metrics_page(),  # noqa: PLW0108 (built below)
        apply_admin=lambda op: operations.apply(op),  # noqa: PLW0108 (built below)
        clock=clock,
        own_response_owner=lambda response_id: affinity.owners.get(response_id),  # noqa: PLW0108
    )  # fmt: skip
    metrics.registry.register(SharedStateCollector(shared))
    planner = PdPlanner(
        config.disaggregation, stack.index, stack.ttft_model,
        new_link_model(config.disaggregation), config.routing.prefix.chars_per_token,
        prefill_scheduler=build_scheduler(config.routing, stack.registry, clock, rng),
    )  # fmt: skip
    router = RequestRouter(
        pool, stack.scheduler, config.routing, ledger, probe_readmit_s(h), planner=planner
    )
    affinity = ResponseAffinity(
        config.responses, clock,
        link=shared.link, prefix=shared.prefix, count=metrics.count_response_affinity,
        siblings=peers.response_owner if peers is not None and shared.link is None else None,
    )  # fmt: skip
    for event in EVENTS:  # every series from the start, so rates work from zero
        metrics.response_affinity.labels(event)
    recorder = recorder_for(config, clock)
    objectives = Objectives({o.name: o.priority for o in config.objectives})
    rewrites = ModelRewrites([rewrite_rule(e) for e in config.rewrites], rng)
    tracing = build_tracing(os.environ)  # OTEL_TRACES_EXPORTER=otlp; None: off, free
    director = Director(
        router, pool, ledger, metrics, clock,
        tokenizers=tokenizers,
        tokenize=bool(config.tokenizers),
        tracer=tracing.tracer if tracing is not None else None,
        recorder=recorder,
        access_log=config.server.access_log,
        affinity=affinity,
        rewrites=rewrites,
    )  # fmt: skip

    def backend_removed(backend_id: str) -> None:
        """A backend left: what was learnt about it goes (a pod that comes back at the same
        address is a new engine, with an empty cache)."""
        ledger.forget(backend_id)
        stack.ttft_model.forget(backend_id)
        metrics.forget_backend(backend_id)

    def ranks_found(backend: Backend) -> None:
        """A member turned out data-parallel: its ranks are the targets from now on, and
        what was learnt about the member as one target goes."""
        backend_removed(backend.id)
        kv_loops.ranks_changed(backend)

    pool.on_ranks.append(ranks_found)
    pod_backends = PodBackends(pool, backend_removed, kv_loops)
    backends = RuntimeBackends(pool, kv_loops, backend_removed, config.backends, pod_backends.owns)
    live = LiveConfig(
        config, backends, router, pool,
        lambda section: build_scheduler(section, stack.registry, clock, rng),
    )  # fmt: skip
    # A worker applies the admin operations its siblings were asked for; reloads are the
    # command line's reloader, set on the runtime before start.
    operations = AdminOperations(
        backends, lambda: runtime.reloader, peers.repeat if peers else None
    )
    runtime = Runtime(
        clock=clock,
        stack=stack,
        pool=pool,
        metrics=metrics,
        ledger=ledger,
        router=router,
        director=director,
        admission=build_admission(
            config, pool, stack.scheduler, clock, metrics.registry, objectives=objectives
        ),
        objectives=objectives,
        rewrites=rewrites,
        access=AccessControl(config, os.environ, clock, metrics.count_auth_refused),
        kv_loops=kv_loops,
        tokenizers=tokenizers,
        shared=shared,
        peers=peers,
        recorder=recorder,
        tracing=tracing,
        pod_backends=pod_backends,
        backends=backends,
        live=live,
        operations=operations,
        tuning=TuningBoard(config.tuning, live.use_profile, live.live_profile, metrics.registry),
    )
    return runtime


def rewrite_rule(entry: RewriteEntry) -> RewriteRule:
    """A `rewrites:` entry as the rule `routing.model_rewrite` applies."""
    targets = tuple((t.model, t.weight) for t in entry.targets)
    return RewriteRule(frozenset(entry.models), targets, "config")
