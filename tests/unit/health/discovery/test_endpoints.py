from __future__ import annotations

import pytest

from health.discovery.endpoints import (
    PoolSpec,
    PoolSpecError,
    label_selector,
    parse_pool,
    pod_endpoints,
    pod_ready,
    pool_endpoints,
)
from tests.support.fake_kube import Obj, inference_pool, pod

POOL = PoolSpec(selector=(("app", "llm"),), target_ports=(8000, 8001))


def test_parse_pool_reads_selector_ports_and_protocol() -> None:
    obj = inference_pool("p", selector={"b": "2", "a": "1"}, ports=(8000, 9000))
    obj["spec"]["appProtocol"] = "kubernetes.io/h2c"
    spec = parse_pool(obj)
    assert spec == PoolSpec((("a", "1"), ("b", "2")), (8000, 9000), "kubernetes.io/h2c")
    assert label_selector(spec) == "a=1,b=2"
    assert parse_pool(inference_pool("p")).app_protocol == "http"


@pytest.mark.parametrize(
    "spec",
    [None, {"selector": {"matchLabels": {"a": "1"}}}, {"targetPorts": [{"number": 0}]}],
)
def test_parse_pool_rejects_pools_without_usable_ports(spec: object) -> None:
    with pytest.raises(PoolSpecError):
        parse_pool({"spec": spec})


def test_one_endpoint_per_target_port_of_a_ready_selected_pod() -> None:
    eps = pod_endpoints(pod("a", "10.1.2.3"), POOL)
    assert [e.url for e in eps] == ["http://10.1.2.3:8000", "http://10.1.2.3:8001"]
    assert eps[0].address == "10.1.2.3:8000"
    assert {e.pod for e in eps} == {"a"}


def test_ipv6_pod_ips_are_bracketed() -> None:
    [ep, _] = pod_endpoints(pod("a", "fd00::5"), POOL)
    assert ep.url == "http://[fd00::5]:8000"


@pytest.mark.parametrize(
    ("labels", "engine"),
    [
        ({"app": "llm"}, "vllm"),
        ({"app": "llm", "kvgate.dev/engine": "sglang"}, "sglang"),
        ({"app": "llm", "kvgate.dev/engine": "made-up"}, "vllm"),
        ({"app": "llm", "inference.networking.k8s.io/engine-type": "sglang"}, "sglang"),
        (
            {
                "app": "llm",
                "kvgate.dev/engine": "trtllm",
                "inference.networking.k8s.io/engine-type": "sglang",
            },
            "trtllm",
        ),
    ],
)
def test_engine_comes_from_the_pod_label(labels: dict[str, str], engine: str) -> None:
    assert {e.engine for e in pod_endpoints(pod("a", labels=labels), POOL)} == {engine}


@pytest.mark.parametrize(
    "obj",
    [
        pod("a", ready=False),
        pod("a", ip=None),
        pod("a", terminating=True),
        pod("a", labels={"app": "web"}),
        pod("a", labels={}),
    ],
)
def test_unready_unaddressed_terminating_or_unselected_pods_give_nothing(obj: Obj) -> None:
    assert pod_endpoints(obj, POOL) == []


def test_ready_needs_the_ready_condition_true() -> None:
    no_conditions = pod("a")
    no_conditions["status"]["conditions"] = []
    assert not pod_ready(no_conditions)
    assert pod_ready(pod("a"))


def test_an_empty_selector_selects_nothing_and_no_pool_means_no_endpoints() -> None:
    assert pod_endpoints(pod("a"), PoolSpec((), (8000,))) == []
    assert pool_endpoints(None, [pod("a")]) == frozenset()
    assert len(pool_endpoints(POOL, [pod("a", "10.0.0.1"), pod("b", "10.0.0.2")])) == 4
