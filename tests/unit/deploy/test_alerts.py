"""The alert rules (deploy/prometheus): a valid PrometheusRule whose every expression reads
series a real gateway's `/metrics` serves, with labels those series carry; `promtool check
rules` accepts them and `promtool test rules` (tests/data/prometheus) sees each alert fire on
what should raise it and stay quiet on its near misses.

promtool comes with Debian's `prometheus` package (.ci/run installs it); where it is missing
the promtool tests are skipped, except in CI (`CI` set), where its absence fails them.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.metrics import GatewayMetrics
from routing.config.schema import parse_config
from tests.unit.deploy.test_dashboard import metric_names, series_names
from tests.unit.deploy.test_manifests import crd_schema

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "deploy" / "prometheus" / "kvgate-alerts.yaml"
PROMTOOL_TESTS = REPO / "tests" / "data" / "prometheus" / "kvgate-alerts.test.yaml"
# Labels Prometheus adds to every scraped series, and the one `--workers N` adds to gauges.
TARGET_LABELS = {"job", "instance", "worker"}
EXPECTED = {
    "KvgateNoHealthyBackend",
    "KvgateHighErrorRatio",
    "KvgateAdmissionShedding",
    "KvgateTimeToFirstTokenHigh",
    "KvgateSharedStateDegraded",
    "KvgateBackendEjections",
    "KvgateBackendDown",
}


@pytest.fixture(scope="module")
def rule() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def _alerts(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


async def _served_page() -> str:
    """GET /metrics of a gateway sharing its state through Redis (none needs to run: the
    page is served before the first connection), over ASGI."""
    raw = {
        "backends": [{"url": "http://10.0.0.1:8000", "id": "b1", "models": ["m"]}],
        "state": {"backend": "redis", "url": "redis://127.0.0.1:1/0"},
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 0.0, rng=random.Random(0)))
    scope = {
        "type": "http", "method": "GET", "path": "/metrics", "query_string": b"",
        "headers": [], "client": ("127.0.0.1", 40000),
    }  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert sent[0]["status"] == 200
    return str(sent[1]["body"].decode())


@pytest.fixture(scope="module")
def page() -> str:
    return asyncio.run(_served_page())


def _label_names(page: str) -> dict[str, set[str]]:
    """Series name → the labels its family carries (from the page's samples, and from the
    gateway's own metrics, whose labelled series exist only once counted)."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    for metric in vars(GatewayMetrics()).values():
        if isinstance(metric, MetricWrapperBase):
            for suffix in ("", "_total", "_bucket", "_sum", "_count"):
                extra = {"le"} if suffix == "_bucket" else set()
                out.setdefault(metric._name + suffix, set()).update(metric._labelnames, extra)
    return out


def test_the_rule_is_a_valid_prometheus_rule(rule: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(crd_schema(rule["apiVersion"], rule["kind"])).validate(rule)
    broken = {**rule, "spec": {"groups": [{"name": "x", "rules": [{"alert": "A", "exprr": 1}]}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(crd_schema(rule["apiVersion"], rule["kind"])).validate(broken)


def test_every_alert_the_fleet_needs_is_there_with_its_severity_and_words(
    rule: dict[str, Any],
) -> None:
    alerts = _alerts(rule)
    assert {a["alert"] for a in alerts} == EXPECTED
    for a in alerts:
        assert a["labels"]["severity"] in {"critical", "warning"}, a["alert"]
        assert a["annotations"]["summary"] and a["annotations"]["description"], a["alert"]


def test_every_expression_reads_what_a_gateway_serves(rule: dict[str, Any], page: str) -> None:
    exported = series_names(page)
    labels = _label_names(page)
    for a in _alerts(rule):
        expr, where = a["expr"], a["alert"]
        names = metric_names(expr)
        assert names, where
        unknown = sorted(n for n in names if n not in exported)
        assert not unknown, f"{where}: kvgate serves no {unknown}"
        for fn, name in re.findall(r"\b(rate|increase)\(\s*([A-Za-z_:][A-Za-z0-9_:]*)", expr):
            assert exported[name] in {"counter", "histogram"}, (where, fn, name)
        if "histogram_quantile" in expr:
            assert all(exported[n] == "histogram" and n.endswith("_bucket") for n in names)
        known = set().union(*(labels[n] for n in names)) | TARGET_LABELS
        used = set(re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"", expr))
        for grouping in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            used |= {label.strip() for label in grouping.split(",") if label.strip()}
        assert used <= known, f"{where}: labels {sorted(used - known)} are on none of {names}"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            raise AssertionError("promtool is missing: .ci/run installs Debian's prometheus")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def _rules_file(rule: dict[str, Any], directory: Path) -> Path:
    path = directory / "kvgate-alerts.rules.yaml"  # the name the promtool tests load
    path.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    return path


def test_promtool_accepts_the_rules(rule: dict[str, Any], tmp_path: Path) -> None:
    promtool = _promtool()
    done = subprocess.run(
        [promtool, "check", "rules", str(_rules_file(rule, tmp_path))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(EXPECTED)} rules found" in done.stdout


def test_each_alert_fires_on_its_cause_and_not_on_its_near_miss(
    rule: dict[str, Any], tmp_path: Path
) -> None:
    promtool = _promtool()
    _rules_file(rule, tmp_path)
    tests = tmp_path / PROMTOOL_TESTS.name
    shutil.copy(PROMTOOL_TESTS, tests)
    cases = yaml.safe_load(tests.read_text())["tests"]
    tested = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert tested == EXPECTED
    done = subprocess.run(
        [promtool, "test", "rules", str(tests)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
