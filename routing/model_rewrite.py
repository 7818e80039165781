"""`ModelRewrites`: InferenceModelRewrite rules, a request's model → the model the engine gets.

A rule matches a request whose model is one of its `models` exactly, or every request when it
names none (a generic rule). The rule that applies: an exact match before a generic one, then
the config's rules before the cluster's, then the cluster's in the order `watched` gives them
(oldest object first, each object's rules in order). Its target is dealt from a deck holding
target i weight_i times (weights divided by their gcd), shuffled with the injected RNG and dealt
again once empty: every Σ weight requests split exactly by weight, in random order (a seeded
run repeats). Above `MAX_DECK` cards each draw is independent, target i with probability
weight_i / Σ weight. Weight 0: never drawn; all 0: equal shares. No rule: the model stays.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

MAX_DECK = 1000  # cards in a rule's deck; weights summing to more are drawn independently


@dataclass(frozen=True, slots=True)
class RewriteRule:
    """Requests for one of `models` (any, when empty) go to the weighted `targets`."""

    models: frozenset[str]
    targets: tuple[tuple[str, int], ...]  # (model, weight)
    source: str = "config"  # where it came from, for logs: "config" or namespace/name

    def shares(self) -> tuple[tuple[str, int], ...]:
        """The targets' weights divided by their gcd (all 0: 1 each)."""
        weights = [w for _, w in self.targets]
        if not any(weights):
            return tuple((m, 1) for m, _ in self.targets)
        gcd = math.gcd(*weights)
        return tuple((m, w // gcd) for m, w in self.targets)

    def draw(self, rng: random.Random) -> str:
        """One target drawn independently, with probability weight / Σ weight."""
        shares = self.shares()
        point = rng.randrange(sum(w for _, w in shares))
        for model, weight in shares:
            if point < weight:
                return model
            point -= weight
        raise AssertionError("unreachable: point < Σ weight")


class ModelRewrites:
    """The rules in force: the config's, then the cluster's (see the module docstring)."""

    def __init__(self, configured: Sequence[RewriteRule], rng: random.Random) -> None:
        self._configured = tuple(configured)
        self._rng = rng
        self._exact: dict[str, RewriteRule] = {}
        self._generic: RewriteRule | None = None
        self._decks: dict[RewriteRule, list[str]] = {}  # each rule's cards left, dealt from the end
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
        live = {*exact.values(), generic}
        self._decks = {r: deck for r, deck in self._decks.items() if r in live}

    def rule(self, model: str) -> RewriteRule | None:
        """The rule that applies to a request for `model`, if any."""
        return self._exact.get(model, self._generic)

    def target(self, model: str) -> str | None:
        """The model a request for `model` goes to, drawn now; None when no rule applies."""
        rule = self.rule(model)
        if rule is None:
            return None
        deck = self._decks.get(rule)
        if not deck:
            shares = rule.shares()
            if sum(w for _, w in shares) > MAX_DECK:
                return rule.draw(self._rng)
            deck = self._decks[rule] = [m for m, w in shares for _ in range(w)]
            self._rng.shuffle(deck)
        return deck.pop()
