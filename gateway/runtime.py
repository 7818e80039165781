"""The gateway's parts, built once (`gateway.compose.build_runtime`) and shared by every
entry point: the front door's ASGI app, the endpoint picker, the admin views and the command
line read what they need from here; none of them builds its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.access_control import AccessControl
from gateway.admin_ops import AdminOperations
from gateway.admission.controller import AdmissionController
from gateway.cache_ledger import CacheLedger
from gateway.config_reload import ConfigReloader, LiveConfig
from gateway.director import Director
from gateway.kv_event_loops import KvEventLoops
from gateway.metrics import GatewayMetrics
from gateway.pod_backends import PodBackends
from gateway.recorder import TraceRecorder
from gateway.router import RequestRouter
from gateway.runtime_backends import RuntimeBackends
from gateway.state.shared import SharedState
from gateway.supervisor import Supervisor
from gateway.tokens.build import TokenizerSet
from gateway.tracing.setup import Tracing
from gateway.tuner_child import TunerChild
from gateway.tuning import TuningBoard
from gateway.workers.peers import WorkerPeers
from health.pool import BackendPool
from routing.admission.objectives import Objectives
from routing.config.schema import GatewayConfig
from routing.model_rewrite import ModelRewrites
from routing.scheduler import Scheduler
from scoring.stack import RoutingStack


@dataclass(slots=True)
class Runtime:
    """Everything a running gateway is made of (see the module docstring)."""

    clock: Callable[[], float]
    stack: RoutingStack  # scheduler, prefix index, TTFT model, prefix feed, precise index
    pool: BackendPool
    metrics: GatewayMetrics
    ledger: CacheLedger  # each dispatch in the prefix feed; predictions graded by answers
    router: RequestRouter
    director: Director
    admission: AdmissionController
    objectives: Objectives  # InferenceObjectives: the config's, and the cluster's once watched
    rewrites: ModelRewrites  # InferenceModelRewrite rules: likewise
    access: AccessControl  # API keys, the admin key, the header policy
    kv_loops: KvEventLoops
    tokenizers: TokenizerSet
    shared: SharedState
    peers: WorkerPeers | None  # a worker of `kvgate serve --workers N`
    recorder: TraceRecorder | None
    tracing: Tracing | None
    pod_backends: PodBackends
    backends: RuntimeBackends  # the admin API's and the config file's backends
    live: LiveConfig
    operations: AdminOperations
    tuning: TuningBoard  # the self-tuning loop's reports and switches (`/admin/tuning`)
    reloader: ConfigReloader | None = None  # set by the command line before start
    tuner: TunerChild | None = None  # `kvgate tune` as a child, set by the command line
    api_port: int | None = None  # the API port bound, once the server listens
    loops: Supervisor | None = None  # the background loops, while `Services` runs them

    @property
    def config(self) -> GatewayConfig:
        """The running config (a reload replaces its live fields)."""
        return self.live.config

    @property
    def scheduler(self) -> Scheduler:
        return self.router.scheduler

    def reconfigure(self, new: GatewayConfig) -> dict[str, Any]:
        """Apply a reloaded config's live fields (`gateway.config_reload`)."""
        return self.live.apply(new)

    def metrics_page(self) -> bytes:
        """This process's Prometheus exposition, per-backend gauges brought up to date."""
        return self.metrics.page(self.pool, self.clock())

    async def metrics_exposition(self) -> bytes:
        """`/metrics`: this process's page, or with workers the whole gateway's."""
        return self.metrics_page() if self.peers is None else await self.peers.metrics_page()
