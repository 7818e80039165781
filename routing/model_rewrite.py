"""`ModelRewrites`: InferenceModelRewrite rules, a request's model → the model the engine gets.

A rule matches a request whose model is one of its `models` exactly, or every request when it
names none (a generic rule). The rule that applies: an exact match before a generic one, then
the config's rules before the cluster's, then the cluster's in the order `watched` gives them
(oldest object first, each object's rules in order). Its target is drawn by weight: target i
with probability weight_i / Σ weight (`rng.randrange(Σ)`, the RNG injected, so a seeded run is
repeatable); a target of weight 0 is never drawn. No rule: the model stays.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RewriteRule:
    """Requests for one of `models` (any, when empty) go to the weighted `targets`."""

    models: frozenset[str]
    targets: tuple[tuple[str, int], ...]  # (model, weight)
    source: str = "config"  # where it came from, for logs: "config" or namespace/name

    def draw(self, rng: random.Random) -> str:
        total = sum(w for _, w in self.targets)
        if total <= 0:  # no weights at all: an equal share each
            return self.targets[rng.randrange(len(self.targets))][0]
        point = rng.randrange(total)
        for model, weight in self.targets:
            if point < weight:
                return model
            point -= weight
        raise AssertionError("unreachable: point < total")


class ModelRewrites:
    """The rules in force: the config's, then the cluster's (see the module docstring)."""

    def __init__(self, configured: Sequence[RewriteRule], rng: random.Random) -> None:
        self._configured = tuple(configured)
        self._rng = rng
        self._exact: dict[str, RewriteRule] = {}
        self._generic: RewriteRule | None = None
        self.watched(())

    def __bool__(self) -> bool:
        return bool(self._exact) or self._generic is not None

    def watched(self, rules: Sequence[RewriteRule]) -> None:
        """The cluster's rules now (all of them, in precedence order)."""
        exact: dict[str, RewriteRule] = {}
        generic: RewriteRule | None = None
        for rule in (*self._configured, *rules):
            for model in rule.models:
                exact.setdefault(model, rule)
            if not rule.models and generic is None:
                generic = rule
        self._exact, self._generic = exact, generic

    def rule(self, model: str) -> RewriteRule | None:
        """The rule that applies to a request for `model`, if any."""
        return self._exact.get(model, self._generic)

    def target(self, model: str) -> str | None:
        """The model a request for `model` goes to, drawn now; None when no rule applies."""
        rule = self.rule(model)
        return None if rule is None else rule.draw(self._rng)
