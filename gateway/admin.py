"""Admin API: backend state (`GET /admin/backends`, one entry per routing target: a
data-parallel engine's ranks apart) and dry-run routing (`POST /admin/route`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.cache_ledger import CacheHits, PreciseHits
from gateway.errors import BadRequestError
from gateway.inference_request import API_BY_PATH, InferenceRequest, inference_request
from gateway.router import RequestRouter, Route
from health.pool import BackendPool
from routing.types import EngineMetrics
from scoring.scorers.estimated_ttft import displaced_tokens
from scoring.state.cache_view import CacheView
from scoring.state.precise_index import PreciseIndex
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients


def backends_state(
    pool: BackendPool,
    index: PrefixIndex,
    ttft_model: OnlineTtftModel,
    cache_hits: Mapping[str, CacheHits] | None = None,
    *,
    tag: Callable[[str], bytes | None] | None = None,
    precise: PreciseIndex | None = None,
    precise_hits: Mapping[str, PreciseHits] | None = None,
) -> dict[str, Any]:
    """Every backend's state; `backend_header`: what `x-kvgate-backend` says for it (`tag`),
    so operators can map an opaque id back to the backend."""
    now = pool.now()
    out = []
    for b in pool:
        ejected_for = b.state.ejected_until() - now
        shown = tag(b.id) if tag is not None else None
        out.append(
            {
                "id": b.id,
                "backend_header": shown.decode() if shown is not None else None,
                "url": b.spec.url,
                "engine": b.spec.engine,
                # A data-parallel rank: its engine (the pool member) and its rank.
                "member": b.parent.id if b.parent is not None else b.id,
                "dp_rank": b.spec.rank,
                "dp_size": b.spec.dp_size if b.spec.rank is not None else None,
                "health": b.state.health(now).value,
                "models": sorted(b.models),
                "models_source": "config" if b.spec.models else "discovered",
                "in_flight": b.in_flight,
                "dispatched": b.dispatched,
                "ejected_for_s": round(ejected_for, 3) if ejected_for > 0 else 0.0,
                "last_error": b.state.last_error,
                "scrape_errors": (b.parent or b).scrape_errors,  # a rank's: its engine's
                "metrics": _metrics(b.metrics, now),
                "prefix_index_blocks": index.blocks(b.id),
                "pending_prefill_tokens": b.pending_prefill_tokens,
                "ttft_line": _line(ttft_model.coefficients(b.id)),
                "cache_hits": _hits((cache_hits or {}).get(b.id)),
                "precise_index": _precise(precise, b.id, (precise_hits or {}).get(b.id)),
            }
        )
    return {"backends": out}


def _precise(
    precise: PreciseIndex | None, backend_id: str, hits: PreciseHits | None
) -> dict[str, Any] | None:
    """The exact view from the backend's KV-cache events, and how its predictions fared."""
    if precise is None or not precise.tracks(backend_id):
        return None
    counters = precise.counters(backend_id)
    return {
        "blocks": precise.blocks(backend_id),
        "block_size": precise.block_size(backend_id),
        "events": dataclasses.asdict(counters) if counters is not None else None,
        "predictions": dataclasses.asdict(hits or PreciseHits()),
    }


def _hits(h: CacheHits | None) -> dict[str, int]:
    """Predicted vs observed cached prompt tokens, over the answers that reported them."""
    h = h or CacheHits()
    return {
        "requests": h.requests,
        "prompt_tokens": h.prompt_tokens,
        "predicted_tokens": h.predicted_tokens,
        "observed_tokens": h.observed_tokens,
        "index_corrections": h.corrections,
        "index_entries_dropped": h.dropped_entries,
    }


def _line(c: TtftCoefficients) -> dict[str, float]:
    return {"overhead_s": c.overhead_s, "prefill_token_s": c.prefill_token_s}


def _metrics(m: EngineMetrics | None, now: float) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "age_s": round(now - m.scraped_at, 3),
        "waiting": m.waiting,
        "running": m.running,
        "kv_usage": m.kv_usage,
        "block_size": m.block_size,
        "num_blocks": m.num_blocks,
    }


def _infer_api(data: Mapping[str, Any], requested: str | None) -> str:
    if requested:
        known = sorted(API_BY_PATH.values())
        if requested not in known:
            raise BadRequestError(f"unknown api {requested!r}; use one of {', '.join(known)}")
        return requested
    if "messages" in data:
        return "chat"
    if "prompt" in data:
        return "completions"
    if "input" in data:
        return "embeddings"
    if "text" in data or "input_ids" in data:
        return "generate"
    raise BadRequestError(
        "body has none of 'messages', 'prompt', 'input', 'text' or 'input_ids' (or name the "
        "API: ?api=)",
        code="missing_field",
    )


def dry_run_request(data: Any, api: str | None, body_bytes: int) -> InferenceRequest:
    """The dry run's parsed body (`data`) as an inference request (`api` inferred when not
    given)."""
    if not isinstance(data, dict):
        raise BadRequestError("request body must be a JSON object", code="invalid_json")
    return inference_request(_infer_api(data, api), data, body_bytes)


def dry_run(
    router: RequestRouter,
    req: InferenceRequest,
    headers: Mapping[str, str],
    *,
    policy: str | None = None,
    token_ids: Sequence[int] | None = None,
    now: float = 0.0,
) -> dict[str, Any]:
    """Route a request without forwarding it (with `policy` if given: an operator may try
    any profile); explain every backend's scores and which index answered for it
    (`cache_source`: precise where its KV-cache events reach the gateway and the model has a
    tokenizer, else approximate)."""
    route = router.route(req, headers, request_id="dry-run", policy=policy, token_ids=token_ids)
    return explain(router, route, now)


def explain(router: RequestRouter, route: Route, now: float) -> dict[str, Any]:
    """The dry run's answer for a decided route."""
    hashes = route.request.prefix_hashes
    ids = [e.id for e in route.endpoints]
    matched = router.ledger.index.match(hashes, ids)
    view = CacheView(router.ledger.index, router.ledger.precise)
    sources = view.source_list(route.request, ids)
    cached = view.cached_list(route.request, ids, router.ledger.feed.chars_per_token, now)
    displaced = dict(
        zip(
            ids,
            displaced_tokens(
                router.ledger.index,
                hashes,
                depths=[matched[i] for i in ids],
                replicas=ids,
                block_chars=route.request.prefix_block_chars,
                chars_per_token=router.ledger.feed.chars_per_token,
            )
            if hashes
            else [0.0] * len(ids),
            strict=True,
        )
    )
    scores = {s.endpoint_id: s for s in route.decision.scores}
    rank = {eid: i for i, eid in enumerate(route.decision.ranked)}
    endpoints = []
    for i, e in enumerate(route.endpoints):
        s = scores.get(e.id)
        endpoints.append(
            {
                "id": e.id,
                "health": e.health.value,
                "in_flight": e.in_flight,
                "matched_blocks": matched[e.id],
                "cache_source": sources[i],
                "predicted_cached_tokens": round(cached[i], 1),
                # reuse-valued tokens its cache would evict to store this prompt
                "displaced_tokens": round(displaced[e.id], 1),
                "eligible": s is not None,
                "excluded_by": route.excluded.get(e.id) or route.decision.filtered_out.get(e.id),
                "scores": dict(s.scores) if s else {},
                "total": s.total if s else None,
                "rank": rank.get(e.id),
            }
        )
    r = route.request
    return {
        "request": {
            "api": r.api,
            "model": r.model,
            "stream": r.stream,
            "session_key": r.session_key,
            "lora_adapter": r.lora_adapter,
            "token_estimate": r.token_estimate,
            "prefix_blocks": len(hashes),
            "prefix_block_chars": r.prefix_block_chars,
            "prompt_tokens": r.prompt_tokens or None,
            "token_blocks": {str(size): len(keys) for size, keys in r.token_keys},
        },
        "decision": {
            "policy": route.decision.profile,
            "target": route.decision.target,
            "reason": route.reason,  # why the target won: scoring.decision_reason
            "ranked": list(route.decision.ranked),
        },
        "disaggregation": _pd(route),
        "endpoints": endpoints,
    }


def _pd(route: Route) -> dict[str, Any] | None:
    """On a prefill/decode pool: the pair, and why the request is split or not (None else)."""
    pd = route.pd
    if pd is None:
        return None
    prefill = pd.prefill
    return {
        "split": pd.split,
        "why": pd.why,  # scoring.pd.planner.WHYS
        "decode": pd.decode.target,
        "prefill": prefill.target if prefill is not None else None,
        "prefill_ranked": list(prefill.ranked) if prefill is not None else [],
        "uncached_tokens_on_decode": pd.uncached_on_decode,
        "moved_tokens": pd.moved_tokens if pd.split else 0,
        "predicted_ttft_s": {"decode_alone": pd.local_ttft_s, "split": pd.split_ttft_s},
    }
