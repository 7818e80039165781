"""The dashboard bench's PromQL subset, against hand-worked values."""

from __future__ import annotations

import json
import math

import pytest

from bench.dashboard.panels import substitute
from bench.dashboard.promql import PromQLError, Store, evaluate
from tests.unit.deploy.test_dashboard import DASHBOARD


def _store() -> Store:
    store = Store()
    for t in range(11):  # counters growing 2/s on a, 1/s on b; a reset on b at t=6
        store.add(t, "req_total", {"backend": "a", "code": "200"}, 2.0 * t)
        store.add(t, "req_total", {"backend": "b", "code": "200"}, t if t < 6 else t - 6.0)
        store.add(t, "queue", {"backend": "a"}, 3.0)
        store.add(t, "queue", {"backend": "b"}, 5.0)
        # 10 observations per second: 4 at or under 0.1, 8 at or under 0.2, all under 0.4.
        for le, per_s in (("0.1", 4), ("0.2", 8), ("0.4", 10), ("+Inf", 10)):
            store.add(t, "lat_bucket", {"le": le, "backend": "a"}, per_s * t)
    return store


def _one(expr: str, t: float = 10.0) -> float:
    [value] = evaluate(expr, _store(), t).values()
    return value


def test_rate_sums_and_counter_resets() -> None:
    assert _one('rate(req_total{backend="a"}[5s])') == pytest.approx(2.0)
    # 1..5, a reset to 0, 0..4: (4 - 1) + the 5 the reset dropped, over the 9 s sampled
    assert _one('rate(req_total{backend="b"}[10s])') == pytest.approx(8 / 9)
    by = evaluate("sum by (backend) (rate(req_total[5s]))", _store(), 10.0)
    assert by == {frozenset({("backend", "a")}): 2.0, frozenset({("backend", "b")}): 1.0}
    assert _one("sum(rate(req_total[5s]))") == pytest.approx(3.0)


def test_instant_selectors_aggregations_and_division() -> None:
    assert _one('max(queue{backend=~"a|b"})') == 5.0
    assert _one('avg(queue{backend!="c"})') == 4.0
    assert _one('sum(queue{backend!~"b"}) / sum(queue)') == pytest.approx(3 / 8)
    assert evaluate("queue", _store(), 30.0) == {}  # older than the lookback: gone
    assert math.isnan(_one("sum(queue) * 0 / (sum(queue) * 0)"))


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    q = "histogram_quantile({}, sum by (le) (rate(lat_bucket[5s])))"
    assert _one(q.format(0.5)) == pytest.approx(0.125)  # rank 5 of 10: a quarter into (0.1, 0.2]
    assert _one(q.format(0.9)) == pytest.approx(0.3)
    assert _one(q.format(1.0)) == pytest.approx(0.4)


def test_outside_the_subset_is_an_error() -> None:
    with pytest.raises(PromQLError):
        evaluate("increase(req_total[5s])", _store(), 10.0)
    with pytest.raises(PromQLError):
        evaluate("sum(queue) offset 5m", _store(), 10.0)


def test_every_panel_of_the_dashboard_parses() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            evaluate(substitute(target["expr"], 15), Store(), 0.0)  # no data, no error
