"""A pool's InferenceObjective and InferenceModelRewrite objects: parsed (pure) and watched.

`objective_priorities(objects, pool)`: name → `spec.priority` (unset: 0) of the objectives
whose `spec.poolRef.name` is `pool`. `rewrite_rules(objects, pool)`: those rewrites' rules in
precedence order (oldest object first by `creationTimestamp`, then name; an object's rules in
order): `matches[].model.value` (type `Exact`; a rule with another type is skipped, none: every
model), `targets[] {modelRewrite, weight}` (weights all unset: equal shares; some unset: those
are never drawn). `ObjectWatch` keeps both current with one informer per kind under
`/apis/{api}/namespaces/{namespace}/`; while the kind is not served (404: its CRD is not
installed) it asks again every `recheck_s`, saying so once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from health.discovery.informer import Informer, Objects, WatchSettings, object_key
from health.discovery.kube_api import KubeAPIError, KubeClient
from routing.model_rewrite import RewriteRule

log = logging.getLogger(__name__)
OBJECTIVES = "inferenceobjectives"
REWRITES = "inferencemodelrewrites"


def _spec_for(obj: Mapping[str, Any], pool: str) -> Mapping[str, Any] | None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    ref = spec.get("poolRef")
    return spec if isinstance(ref, dict) and ref.get("name") == pool else None


def objective_priorities(objects: Objects, pool: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for obj in objects.values():
        spec = _spec_for(obj, pool)
        name = (obj.get("metadata") or {}).get("name")
        if spec is None or not isinstance(name, str):
            continue
        priority = spec.get("priority")
        out[name] = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
    return out


def _age(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def _rule(rule: Any, source: str) -> RewriteRule | None:
    if not isinstance(rule, dict):
        return None
    models = []
    for match in rule.get("matches") or []:
        model = match.get("model") if isinstance(match, dict) else None
        if not isinstance(model, dict) or model.get("type", "Exact") != "Exact":
            return None
        if isinstance(value := model.get("value"), str) and value:
            models.append(value)
    raw = [t for t in rule.get("targets") or [] if isinstance(t, dict)]
    targets = [(t.get("modelRewrite"), t.get("weight")) for t in raw]
    named = [(m, w) for m, w in targets if isinstance(m, str) and m]
    if not named:
        return None
    weighted = any(isinstance(w, int) and w > 0 for _, w in named)
    shares = tuple(
        (m, (w if isinstance(w, int) and w > 0 else 0) if weighted else 1) for m, w in named
    )
    return RewriteRule(frozenset(models), shares, source)


def rewrite_rules(objects: Objects, pool: str) -> list[RewriteRule]:
    out = []
    for obj in sorted(objects.values(), key=_age):
        spec = _spec_for(obj, pool)
        if spec is None:
            continue
        for i, raw in enumerate(spec.get("rules") or []):
            rule = _rule(raw, object_key(obj))
            if rule is None:
                log.warning(
                    "InferenceModelRewrite %s: rule %d unusable, skipped", object_key(obj), i
                )
            else:
                out.append(rule)
    return out


class ObjectWatch:
    """Tells `on_objectives` and `on_rewrites` the pool's objects, kept current."""

    def __init__(
        self,
        client: KubeClient,
        api: str,
        namespace: str,
        pool: str,
        *,
        on_objectives: Callable[[dict[str, int]], None],
        on_rewrites: Callable[[list[RewriteRule]], None],
        settings: WatchSettings | None = None,
        recheck_s: float = 60.0,
    ) -> None:
        self._client = client
        self._base = f"/apis/{api}/namespaces/{namespace}"
        self._pool = pool
        self._on_objectives = on_objectives
        self._on_rewrites = on_rewrites
        self._settings = settings
        self._recheck_s = recheck_s
        self._told: dict[str, object] = {}

    async def run(self) -> None:
        """Run forever; cancel to stop."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._follow(OBJECTIVES, self._objectives), name="watch-objectives")
            tg.create_task(self._follow(REWRITES, self._rewrites), name="watch-rewrites")

    def _objectives(self, objects: Objects) -> None:
        priorities = objective_priorities(objects, self._pool)
        if self._changed(OBJECTIVES, priorities, len(priorities)):
            self._on_objectives(priorities)

    def _rewrites(self, objects: Objects) -> None:
        rules = rewrite_rules(objects, self._pool)
        if self._changed(REWRITES, rules, len(rules)):
            self._on_rewrites(rules)

    def _changed(self, kind: str, value: object, count: int) -> bool:
        if self._told.get(kind) == value:
            return False
        self._told[kind] = value
        log.info("pool %s: %d from %s", self._pool, count, kind)
        return True

    async def _follow(self, kind: str, on_change: Callable[[Objects], None]) -> None:
        path = f"{self._base}/{kind}"
        said = False
        while True:
            try:
                await self._client.list(path, {"limit": "1"})
            except KubeAPIError as exc:
                if exc.status == 404:
                    if not said:
                        log.info("no %s served at %s (CRD not installed?): none", kind, path)
                        said = True
                    await asyncio.sleep(self._recheck_s)
                    continue
            await Informer(self._client, path, {}, on_change, self._settings).run()
