"""The Grafana dashboard: every metric its queries name is one kvgate, vLLM or SGLang exports.

kvgate's names come from the registry a real `GatewayApp` builds (every collector, with a
backend that publishes KV events so the precise-index families are there too); vLLM's from
the real vLLM 0.32 `/metrics` page in tests/fixtures, SGLang's from the page written from its
collector's declarations. A name in a query is a series name, so a counter is named with
`_total` and a histogram with `_bucket`, `_sum` or `_count`; rate() must be over a counter or
a histogram series, histogram_quantile() over buckets. Engine panels read both engines; the
gateway's series are narrowed by the `job` variable (chained to `pool`), models by `model`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.metrics import GatewayMetrics
from routing.config.schema import parse_config

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "deploy" / "grafana" / "kvgate-dashboard.json"
VLLM_PAGE = REPO / "tests" / "fixtures" / "vllm-0.32" / "metrics_after.txt"
SGLANG_PAGE = REPO / "tests" / "fixtures" / "sglang-synthetic" / "metrics_serving.txt"

# PromQL words that are not metric names where they stand alone.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
_KEYWORDS |= {"and", "or", "unless", "offset", "inf", "nan"}
# Aggregations: `sum by (x) (...)` puts the grouping between the name and its parenthesis.
_KEYWORDS |= {"sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk"}
_KEYWORDS |= {"bottomk", "quantile", "count_values", "limitk", "limit_ratio"}
_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"'  # a string
    r"|\{[^}]*\}"  # label matchers
    r"|\[[^\]]*\]"  # a range
    r"|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<call>\s*\()?"  # a name, or a function's
    r"|."
)
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
_NAME_MATCHER = re.compile(r'__name__\s*=~?\s*"([^"]*)"')


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects: identifiers that are not functions, aggregations,
    keywords or the labels of a `by (...)` / `without (...)` clause, and the alternatives of
    a `{__name__=~"a|b"}` matcher."""
    names: set[str] = set()
    in_grouping = False
    for m in _TOKEN.finditer(expr):
        name = m.group("name")
        if (matcher := _NAME_MATCHER.search(m.group(0))) is not None and m.group(0)[0] == "{":
            names.update(matcher.group(1).split("|"))
        elif name is None:
            in_grouping = in_grouping and m.group(0) != ")"
        elif m.group("call"):  # f(...), sum(...), or by (...)
            in_grouping = name in {"by", "without", "on", "ignoring"}
        elif not in_grouping and name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def series_names(text: str) -> dict[str, str]:
    """Series name → its family's type, for every family a /metrics page declares."""
    out: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for suffix in _SUFFIXES.get(family.type, ("",)):
            out[family.name + suffix] = family.type
    return out


def _kvgate_page() -> str:
    raw = {
        "backends": [
            {"url": "http://a:8000", "id": "a", "models": ["m"]},
            {"url": "http://b:8000", "id": "b", "models": ["m"], "kv_events": "tcp://b:5557"},
        ]
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 0.0, rng=random.Random(0)))
    return app.runtime.metrics_page().decode()


@pytest.fixture(scope="module")
def exported() -> dict[str, str]:
    engines = {**series_names(VLLM_PAGE.read_text()), **series_names(SGLANG_PAGE.read_text())}
    return {**engines, **series_names(_kvgate_page())}


def _queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    for panel in dashboard["panels"]:
        for nested in [panel, *panel.get("panels", [])]:
            for target in nested.get("targets", []):
                yield f"panel {nested['title']!r} {target['refId']}", target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
            assert found, var["definition"]
            yield f"variable {var['name']!r}", found.group(1)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def test_the_tokenizer_finds_metric_names_only() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, backend) (rate(vllm:ttft_seconds_bucket{le!="1",'
        ' instance=~"a|b"}[5m]))) / on (instance) group_left max without (job) (up) > bool 0'
    )
    assert metric_names(expr) == {"vllm:ttft_seconds_bucket", "up"}
    assert metric_names("histogram_quantile(0.5, x_bucket) + sum(y)") == {"x_bucket", "y"}
    assert metric_names('{__name__=~"vllm:a|sglang:b", model_name=~"$model"}') == {
        "vllm:a",
        "sglang:b",
    }


def test_every_query_names_an_exported_metric(
    dashboard: dict[str, Any], exported: dict[str, str]
) -> None:
    queries = list(_queries(dashboard))
    assert len(queries) > 20
    unknown = [
        (where, name)
        for where, expr in queries
        for name in sorted(metric_names(expr))
        if name not in exported
    ]
    assert not unknown, f"metrics neither kvgate nor an engine exports: {unknown}"


def test_rates_are_of_counters_and_quantiles_of_buckets(
    dashboard: dict[str, Any], exported: dict[str, str]
) -> None:
    for where, expr in _queries(dashboard):
        for name in re.findall(r"\brate\(\s*([A-Za-z_:][A-Za-z0-9_:]*)", expr):
            assert exported.get(name) in {"counter", "histogram"}, (where, name)
            assert not name.endswith("_created"), (where, name)
        if "histogram_quantile" in expr:
            names = metric_names(expr)
            assert names and all(n.endswith("_bucket") for n in names), (where, names)
            assert all(exported.get(n) == "histogram" for n in names), (where, names)


def test_panels_use_the_datasource_variable_and_fit_the_grid(dashboard: dict[str, Any]) -> None:
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "job", "model", "pool", "backend", "instance"} <= variables
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_the_kustomization_ships_the_dashboard_to_grafanas_sidecar() -> None:
    kustomization = yaml.safe_load((DASHBOARD.parent / "kustomization.yaml").read_text())
    assert kustomization["generatorOptions"]["labels"] == {"grafana_dashboard": "1"}
    [generator] = kustomization["configMapGenerator"]
    assert [DASHBOARD.parent / f for f in generator["files"]] == [DASHBOARD]


def _selectors(expr: str) -> Iterator[tuple[str, str]]:
    """(metric name, its label matchers) of every selector in `expr`."""
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?", expr):
        if m.group(1) in metric_names(expr):
            yield m.group(1), m.group(2) or ""


def test_engine_panels_read_vllm_and_sglang_alike(dashboard: dict[str, Any]) -> None:
    engine_panels = 0
    for panel in dashboard["panels"]:
        exprs = " ".join(t["expr"] for t in panel.get("targets", []))
        vllm, sglang = "vllm:" in exprs, "sglang:" in exprs
        assert vllm == sglang, f"panel {panel['title']!r} reads one engine only"
        engine_panels += vllm
    assert engine_panels >= 6


def _model_labelled() -> set[str]:
    """kvgate's families with a `model` label (their series need no child to be known)."""
    metrics = GatewayMetrics()
    return {
        m._name
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase) and "model" in m._labelnames
    }


def test_the_variables_narrow_every_query(dashboard: dict[str, Any]) -> None:
    """kvgate's series by job (and model where they carry one), the engines' by instance and
    model: no panel mixes in other gateways' or other jobs' series."""
    with_model = _model_labelled()
    assert "kvgate_requests" in with_model
    for where, expr in _queries(dashboard):
        if where.startswith("variable"):
            continue
        for name, matchers in _selectors(expr):
            if name.startswith(("vllm:", "sglang:")):
                assert 'instance=~"$instance"' in matchers, (where, name)
                assert 'model_name=~"$model"' in matchers, (where, name)
                continue
            assert 'job=~"$job"' in matchers, (where, name)
            if re.sub(r"_(total|bucket|sum|count)$", "", name) in with_model:
                assert 'model=~"$model"' in matchers, (where, name)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert "$pool" in variables["job"]["definition"]  # the pool's gateways
    assert "allValue" not in variables["job"]  # "All": kvgate's jobs, not the engines' too
