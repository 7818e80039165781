"""The PromQL the dashboard uses, evaluated over scraped samples held in memory.

Supported: selectors with `=`, `!=`, `=~`, `!~` matchers and a range (`[15s]`); `rate()`;
`sum`, `max`, `min`, `avg` with `by (...)`; `histogram_quantile()`; `/ * + -` between two
vectors (matched on equal label sets) or a vector and a number. That is the whole grammar the
dashboard's panels need; anything else raises `PromQLError` (so a new panel that needs more
shows up here, not as a silently empty plot).

Evaluation follows Prometheus closely enough for a picture: an instant selector takes each
series' latest sample within `lookback_s`; `rate` is the slope between the first and last
samples inside the range (counter resets added back, no extrapolation to the range's ends);
`histogram_quantile` interpolates linearly inside the bucket, as Prometheus does.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise

Labels = frozenset[tuple[str, str]]
Points = list[tuple[float, float]]
Matcher = tuple[str, str, str]  # label, operator, value
Vector = dict[Labels, float]
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?(?:e-?\d+)?)|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)"
    r'|(?P<str>"(?:[^"\\]|\\.)*")|(?P<dur>\[\d+[smh]\])|(?P<op>=~|!~|!=|[(){},=/*+-]))'
)
_AGGREGATIONS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "max": max,
    "min": min,
    "avg": lambda xs: sum(xs) / len(xs),
}
_OPS: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b else (math.nan if a == 0 or math.isnan(a) else math.inf),
}


class PromQLError(ValueError):
    """An expression outside the supported subset."""


@dataclass(slots=True)
class Store:
    """Scraped series: (metric name, labels) → [(time, value)], in time order."""

    series: dict[tuple[str, Labels], Points] = field(default_factory=lambda: defaultdict(list))

    def add(self, t: float, name: str, labels: Mapping[str, str], value: float) -> None:
        self.series[(name, frozenset(labels.items()))].append((t, value))

    def select(self, name: str, matchers: list[Matcher]) -> list[tuple[Labels, Points]]:
        return [
            (labels, points)
            for (n, labels), points in self.series.items()
            if n == name and all(_matches(dict(labels), m) for m in matchers)
        ]


def _matches(labels: Mapping[str, str], matcher: tuple[str, str, str]) -> bool:
    key, op, want = matcher
    have = labels.get(key, "")
    if op in {"=~", "!~"}:
        return (re.fullmatch(want, have) is not None) == (op == "=~")
    return (have == want) == (op == "=")


class _Parser:
    """Recursive descent over the tokens; `evaluate` builds the value at one instant."""

    def __init__(self, expr: str, store: Store, t: float, lookback_s: float) -> None:
        self._tokens = [m for m in _TOKEN.finditer(expr) if m.group(0).strip()]
        if "".join(m.group(0) for m in _TOKEN.finditer(expr)).strip() != expr.strip():
            raise PromQLError(f"cannot tokenize {expr!r}")
        self._i = 0
        self._store, self._t, self._lookback = store, t, lookback_s

    def evaluate(self) -> Vector | float:
        value = self._sum()
        if self._i != len(self._tokens):
            raise PromQLError(f"unexpected {self._peek()!r}")
        return value

    def _peek(self) -> str:
        return self._tokens[self._i].group(0).strip() if self._i < len(self._tokens) else ""

    def _take(self, want: str | None = None) -> str:
        token = self._peek()
        if want is not None and token != want:
            raise PromQLError(f"expected {want!r}, got {token!r}")
        self._i += 1
        return token

    def _sum(self) -> Vector | float:
        left = self._product()
        while self._peek() in {"+", "-"}:
            left = _binary(self._take(), left, self._product())
        return left

    def _product(self) -> Vector | float:
        left = self._atom()
        while self._peek() in {"*", "/"}:
            left = _binary(self._take(), left, self._atom())
        return left

    def _atom(self) -> Vector | float:
        token = self._take()
        if token == "(":
            value = self._sum()
            self._take(")")
            return value
        if re.fullmatch(r"\d.*", token):
            return float(token)
        if token in _AGGREGATIONS:
            return self._aggregate(token)
        if token == "rate":
            return self._rate()
        if token == "histogram_quantile":
            self._take("(")
            q = self._sum()
            self._take(",")
            vector = self._sum()
            self._take(")")
            if not isinstance(q, float) or isinstance(vector, float):
                raise PromQLError("histogram_quantile(number, vector)")
            return _quantile(q, vector)
        name, matchers = token, self._matchers()
        out: Vector = {}
        for labels, points in self._store.select(name, matchers):
            recent = _within(points, self._t - self._lookback, self._t)
            if recent:
                out[labels] = recent[-1][1]
        return out

    def _matchers(self) -> list[Matcher]:
        matchers: list[Matcher] = []
        if self._peek() != "{":
            return matchers
        self._take("{")
        while self._peek() != "}":
            key, op, value = self._take(), self._take(), self._take()
            matchers.append((key, op, value[1:-1].encode().decode("unicode_escape")))
            if self._peek() == ",":
                self._take()
        self._take("}")
        return matchers

    def _rate(self) -> Vector:
        self._take("(")
        name = self._take()
        matchers = self._matchers()
        window = _seconds(self._take())
        self._take(")")
        out: Vector = {}
        for labels, points in self._store.select(name, matchers):
            inside = _within(points, self._t - window, self._t)
            if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
                continue
            resets = sum(a[1] for a, b in pairwise(inside) if b[1] < a[1])
            growth = inside[-1][1] - inside[0][1] + resets
            out[labels] = growth / (inside[-1][0] - inside[0][0])
        return out

    def _aggregate(self, op: str) -> Vector:
        by = self._grouping()
        self._take("(")
        inner = self._sum()
        self._take(")")
        by = by if by is not None else self._grouping()
        if isinstance(inner, float):
            raise PromQLError(f"{op}() of a number")
        groups: dict[Labels, list[float]] = defaultdict(list)
        for labels, value in inner.items():
            key = frozenset((k, v) for k, v in labels if k in (by or ()))
            groups[key].append(value)
        return {key: _AGGREGATIONS[op](values) for key, values in groups.items()}

    def _grouping(self) -> tuple[str, ...] | None:
        if self._peek() != "by":
            return None
        self._take()
        self._take("(")
        labels = []
        while self._peek() != ")":
            labels.append(self._take())
            if self._peek() == ",":
                self._take()
        self._take(")")
        return tuple(labels)


def _within(points: Points, start: float, end: float) -> Points:
    lo = bisect_right(points, (start, math.inf))
    hi = bisect_right(points, (end, math.inf))
    return points[lo:hi]


def _seconds(duration: str) -> float:
    value, unit = int(duration[1:-2]), duration[-2]
    return value * {"s": 1, "m": 60, "h": 3600}[unit]


def _binary(op: str, left: Vector | float, right: Vector | float) -> Vector | float:
    fn = _OPS[op]
    if isinstance(left, float) and isinstance(right, float):
        return fn(left, right)
    if isinstance(left, float):
        return {k: fn(left, v) for k, v in right.items()}  # type: ignore[union-attr]
    if isinstance(right, float):
        return {k: fn(v, right) for k, v in left.items()}
    return {k: fn(v, right[k]) for k, v in left.items() if k in right}


def _quantile(q: float, vector: Vector) -> Vector:
    """Per label set without `le`: Prometheus' linear interpolation inside the bucket."""
    groups: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    for labels, count in vector.items():
        le = dict(labels).get("le")
        if le is not None:
            groups[frozenset(kv for kv in labels if kv[0] != "le")].append((float(le), count))
    out: Vector = {}
    for key, buckets in groups.items():
        buckets.sort()
        total = buckets[-1][1]
        if total <= 0 or not math.isinf(buckets[-1][0]):
            continue
        rank, lower, below = q * total, 0.0, 0.0
        for upper, count in buckets:
            if count >= rank:
                if math.isinf(upper):
                    out[key] = lower  # past the last finite bound: that bound
                else:
                    share = (rank - below) / (count - below) if count > below else 1.0
                    out[key] = lower + (upper - lower) * share
                break
            lower, below = upper, count
    return out


def evaluate(expr: str, store: Store, t: float, lookback_s: float = 5.0) -> Vector:
    """`expr` at time `t`, as an instant vector (a number becomes one unlabelled series)."""
    value = _Parser(expr, store, t, lookback_s).evaluate()
    return {frozenset(): value} if isinstance(value, float) else value
