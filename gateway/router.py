"""Turns a parsed inference request into a routing decision over the pool's snapshots (for
the proxy, the picker and the dry run alike). A request whose model some backend lists as a
LoRA adapter (vLLM lists one with a `parent`) names it in `RoutingRequest.lora_adapter`. An
API only one engine serves (`ENGINE_ONLY`: SGLang's `/generate`) goes to its backends (to
any when the pool declares none); a request naming no model is for the one model they serve
(`default_model`). Only generating APIs are split on a prefill/decode pool.

No healthy backend: 503 with `Retry-After` the seconds until one may be routable again (an
ejection's earliest end, or `probe_readmit_s` for one down by probes), 1 to `RETRY_AFTER_MAX_S`.
Each `Route` carries how long its decision took (`seconds`: prompt hashing, candidates and the
scheduler's cycle, not tokenization or admission) and why its target won (`reason`, one of
`scoring.decision_reason.REASONS`), for the metrics and the dry run. A request `Pin`ned to
the backend holding a stored response goes there alone (reason `affinity`); that backend gone
is a `ResponseNotFoundError`, neither healthy nor draining a 503 with `Retry-After`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gateway.cache_ledger import CacheLedger
from gateway.errors import (
    BadRequestError,
    ModelNotFoundError,
    NoHealthyBackendError,
    ResponseNotFoundError,
    UnknownPolicyError,
)
from gateway.inference_request import (
    API_BY_PATH,
    ENGINE_ONLY,
    GENERATING_APIS,
    InferenceRequest,
    session_key,
)
from gateway.responses.affinity import Pin
from health.pool import BackendPool
from routing.config.profiles import RoutingSection
from routing.frozen import fast_init
from routing.scheduler import Scheduler, UnknownProfileError
from routing.types import Decision, EndpointSnapshot, Health, RoutingRequest
from scoring.decision_reason import DecisionReasons
from scoring.pd.planner import PdPlan, PdPlanner, decide

POLICY_HEADER = "x-kvgate-policy"
RETRY_AFTER_MAX_S = 60
_ROUTING_HEADERS = (POLICY_HEADER,)
_HEALTHY = Health.HEALTHY  # a global: the enum class's attribute lookup is slower
_PINNABLE = frozenset({Health.HEALTHY, Health.DRAINING})  # draining: it still holds its responses


@fast_init
@dataclass(frozen=True, slots=True)
class Route:
    request: RoutingRequest
    decision: Decision
    endpoints: tuple[EndpointSnapshot, ...]  # every backend, eligible or not
    excluded: Mapping[str, str]  # backend id → why it was not a candidate
    reason: str = "other"  # why the target won (scoring.decision_reason)
    seconds: float = 0.0  # how long the decision took
    pd: PdPlan | None = None  # on a prefill/decode pool: the pair (`decision` is D's)

    @property
    def prefill(self) -> str | None:
        """The prefill backend's id when the request is split, else None."""
        pd = self.pd
        return pd.prefill.target if pd is not None and pd.prefill is not None else None


class RequestRouter:
    def __init__(
        self,
        pool: BackendPool,
        scheduler: Scheduler,
        section: RoutingSection,
        ledger: CacheLedger,
        probe_readmit_s: float = 1.0,
        *,
        planner: PdPlanner | None = None,
    ) -> None:
        self.planner = planner  # prefill/decode placement, used once a prefill backend joins
        self._probe_readmit_s = probe_readmit_s
        self._pool = pool
        self._scheduler = scheduler
        self._set_section(section)
        self.ledger = ledger
        self._reasons = DecisionReasons(ledger.index)

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    def reconfigure(
        self, scheduler: Scheduler, section: RoutingSection, probe_readmit_s: float
    ) -> None:
        """A reloaded config's profiles and options, for every decision from now on."""
        self._scheduler = scheduler
        self._set_section(section)
        self._probe_readmit_s = probe_readmit_s

    def _set_section(self, section: RoutingSection) -> None:
        # The options read per request, kept as plain attributes: a pydantic model's
        # `__getattr__` makes every attribute read on it the slower lookup.
        self._section = section
        self._allow_policy_header = section.allow_policy_header
        self._session_header = section.session_header

    def route(
        self,
        req: InferenceRequest,
        headers: Mapping[str, str],
        request_id: str,
        subset: Collection[str] | None = None,
        policy: str | None = None,
        *,
        token_ids: Sequence[int] | None = None,
        pin: Pin | None = None,
    ) -> Route:
        """Hash `req`'s prompt and decide where it goes; only among the backend ids in
        `subset` when given (an Envoy subset hint to the endpoint picker). `policy` (the
        admin dry run's) wins over the request's policy header. `token_ids`: the prompt as
        the engine will tokenize it, when a tokenizer for the model is configured (a request
        with a `cache_salt` gets no token keys: no event names its blocks). `pin`: the
        request follows a stored response, which only its backend holds."""
        started = time.perf_counter()
        policy = policy or self._policy(headers)
        endpoints = self._pool.snapshots()
        if subset is not None:
            endpoints = tuple(e for e in endpoints if e.id in subset)
        engine = _engine_for(req.api, endpoints)
        candidates: list[EndpointSnapshot] = []
        excluded: dict[str, str] = {}
        if pin is None:
            candidates, excluded = self._candidates(req.model, endpoints, engine)
        block_chars = self.ledger.block_chars(endpoints)
        hashes, prompt_tokens = self.ledger.hashes(req, block_chars)
        adapter = req.model if req.model in self._pool.lora_adapters() else None
        keys: tuple[tuple[int, tuple[int, ...]], ...] = ()
        if token_ids and not req.cache_salt:
            keys = self.ledger.token_keys(token_ids, adapter)
        # Every field by position, in their order: keywords cost a dict per call.
        rreq = RoutingRequest(
            req.model,
            request_id,
            req.api,
            hashes,  # prefix_hashes
            block_chars,  # prefix_block_chars
            prompt_tokens,  # token_estimate
            session_key(req, headers, self._session_header),
            adapter,  # lora_adapter
            req.stream,
            MappingProxyType(self._routing_headers(headers)),
            len(token_ids) if token_ids else 0,  # prompt_tokens
            keys,  # token_keys
        )
        if pin is not None:
            return self._pinned(rreq, pin, endpoints, started)
        return self._decide(rreq, policy, endpoints, candidates, excluded, started=started)

    def stored(
        self,
        request_id: str,
        pin: Pin | None,
        *,
        stream: bool = False,
        subset: Collection[str] | None = None,
    ) -> Route:
        """Where a request on a stored response itself goes (`GET`/`DELETE
        /v1/responses/{id}`, `/cancel`): its backend (`pin`); without one (affinity off)
        the healthy backend with the fewest requests in flight."""
        started = time.perf_counter()
        endpoints = self._pool.snapshots()
        if subset is not None:
            endpoints = tuple(e for e in endpoints if e.id in subset)
        rreq = RoutingRequest(model="", request_id=request_id, api="responses", stream=stream)
        if pin is not None:
            return self._pinned(rreq, pin, endpoints, started)
        ready = sorted((e for e in endpoints if e.healthy), key=lambda e: (e.in_flight, e.id))
        if not ready:
            wait = self._retry_after(endpoints)
            raise NoHealthyBackendError("no healthy backend", retry_after_s=wait)
        decision = Decision(self._scheduler.default_profile, (ready[0].id,), ())
        seconds = time.perf_counter() - started
        return Route(rreq, decision, endpoints, MappingProxyType({}), "other", seconds)

    def _pinned(
        self,
        rreq: RoutingRequest,
        pin: Pin,
        endpoints: tuple[EndpointSnapshot, ...],
        started: float,
    ) -> Route:
        """The route to the backend holding `pin`'s response, and no other (the docstring)."""
        owner = next((e for e in endpoints if e.id == pin.backend_id), None)
        if owner is None:
            if self._pool.find(pin.backend_id) is not None:  # outside the proxy's subset
                raise NoHealthyBackendError(
                    f"the backend holding response '{pin.response_id}' is not among the "
                    "endpoints allowed for this request"
                )
            raise ResponseNotFoundError(pin.response_id)
        if owner.health not in _PINNABLE:
            raise NoHealthyBackendError(
                f"the backend holding response '{pin.response_id}' is unavailable",
                retry_after_s=self._retry_after((owner,)),
            )
        decision = Decision(self._scheduler.default_profile, (owner.id,), ())
        seconds = time.perf_counter() - started
        return Route(rreq, decision, endpoints, MappingProxyType({}), "affinity", seconds)

    def route_hashed(self, rreq: RoutingRequest, policy: str | None = None) -> Route:
        """Decide for a request whose prefix hashes are already cut (as the simulator cuts
        them from a trace): the same decision path as `route`, after hashing."""
        started = time.perf_counter()
        endpoints = self._pool.snapshots()
        candidates, excluded = self._candidates(rreq.model, endpoints)
        return self._decide(rreq, policy, endpoints, candidates, excluded, started=started)

    def default_model(self, api: str) -> str:
        """The model of a request that names none: the one model the backends serving `api`
        list (LoRA adapters aside); a `NoHealthyBackendError` while none lists one, a
        `BadRequestError` when they serve several."""
        endpoints = self._pool.snapshots()
        engine = _engine_for(api, endpoints)
        adapters = self._pool.lora_adapters()
        models = {
            m
            for e in endpoints
            if engine is None or e.engine == engine
            for m in e.models
            if m not in adapters
        }
        if len(models) == 1:
            return models.pop()
        path = _PATHS.get(api, api)
        if not models:
            raise NoHealthyBackendError(f"no backend lists a model for {path} yet")
        raise BadRequestError(
            f"the request names no model and the backends for {path} serve several "
            f"({', '.join(sorted(models))}): add a 'model' field",
            code="missing_field",
        )

    def _candidates(
        self, model: str, endpoints: tuple[EndpointSnapshot, ...], engine: str | None = None
    ) -> tuple[list[EndpointSnapshot], dict[str, str]]:
        healthy = _HEALTHY
        candidates = []
        for e in endpoints:  # a loop: a comprehension is a function object per call
            if model in e.models and e.health is healthy and (engine is None or e.engine == engine):
                candidates.append(e)
        excluded: dict[str, str] = {}
        if len(candidates) < len(endpoints):  # the usual case, every backend eligible, skips this
            for e in endpoints:
                if engine is not None and e.engine != engine:
                    excluded[e.id] = f"not an {engine} engine"
                elif model not in e.models:
                    excluded[e.id] = "model not served"
                elif e.health is not healthy:
                    excluded[e.id] = e.health.value
        if not candidates:
            if engine is not None:
                endpoints = tuple(e for e in endpoints if e.engine == engine)
            self._raise_unroutable(model, endpoints)
        return candidates, excluded

    def _decide(
        self,
        rreq: RoutingRequest,
        policy: str | None,
        endpoints: tuple[EndpointSnapshot, ...],
        candidates: list[EndpointSnapshot],
        excluded: dict[str, str],
        *,
        started: float,
    ) -> Route:
        try:
            decision, pd = decide(
                self.planner, self._scheduler, rreq, candidates,
                disaggregated=self._pool.disaggregated and rreq.api in GENERATING_APIS,
                profile=policy,
            )  # fmt: skip
        except UnknownProfileError:
            known = ", ".join(sorted(self._scheduler.profiles))
            raise UnknownPolicyError(
                f"unknown routing policy {policy!r} in header {POLICY_HEADER} (known: {known})"
            ) from None
        if not decision.ranked:  # why per backend: /admin/route (ids are addresses)
            raise NoHealthyBackendError(f"no backend for model {rreq.model!r} passed the filters")
        profile = self._scheduler.profiles[decision.profile]
        reason = self._reasons.reason(decision, profile, rreq, len(candidates))
        seconds = time.perf_counter() - started
        return Route(rreq, decision, endpoints, MappingProxyType(excluded), reason, seconds, pd)

    def _retry_after(self, endpoints: Collection[EndpointSnapshot]) -> int:
        """Whole seconds until one of `endpoints` may be healthy again (see the docstring)."""
        now = self._pool.now()
        waits = [
            b.state.ejected_until() - now
            for e in endpoints
            if e.health is Health.EJECTED and (b := self._pool.find(e.id)) is not None
        ]
        if len(waits) < len(endpoints):  # some are down by probes, not ejected
            waits.append(self._probe_readmit_s)
        return max(1, min(RETRY_AFTER_MAX_S, math.ceil(min(waits, default=1.0))))

    def _policy(self, headers: Mapping[str, str]) -> str | None:
        # Off by default: a client that picks the profile can pin its requests to one
        # backend past the load filters.
        if not self._allow_policy_header:
            return None
        return headers.get(POLICY_HEADER) or None

    def _routing_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The headers plugins may read: none of a policy header that is not honoured."""
        if not self._allow_policy_header:
            return {}
        return {h: headers[h] for h in _ROUTING_HEADERS if h in headers}

    def _raise_unroutable(self, model: str, endpoints: tuple[EndpointSnapshot, ...]) -> None:
        if not any(e.healthy for e in endpoints):
            wait = self._retry_after(endpoints)
            raise NoHealthyBackendError("no healthy backend", retry_after_s=wait)
        serving = tuple(e for e in endpoints if model in e.models)
        if serving:
            wait = self._retry_after(serving)
            message = f"no healthy backend serves model {model!r}"
            raise NoHealthyBackendError(message, retry_after_s=wait)
        available = sorted(self._pool.known_models())
        listing = ", ".join(available) if available else "none"
        raise ModelNotFoundError(f"The model `{model}` does not exist. Available models: {listing}")


_PATHS = {api: path for path, api in API_BY_PATH.items()}


def _engine_for(api: str, endpoints: Sequence[EndpointSnapshot]) -> str | None:
    """The engine `api` must go to (`ENGINE_ONLY`), unless no backend declares that engine
    (then any backend may speak it: its engine is not declared); None: any."""
    engine = ENGINE_ONLY.get(api)
    if engine is None or not any(e.engine == engine for e in endpoints):
        return None
    return engine
